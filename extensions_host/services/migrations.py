"""State migrations (spec 02 §5): stream every record through the declared steps, stage the
results, swap them in — all in one transaction (a savepoint of the caller's), so a failing
migration leaves every record untouched."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable
from typing import Any

from django.db import DataError, IntegrityError, connection, transaction
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from core.errors import bound_text
from core.validation import first_validation_problem
from extensions_host.models import ExtensionRecord, MigrationStaging, RosterEntry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime.stops import REASON_MAX, redact
from extensions_host.sdk import MAX_RECORD_BYTES, Extension, StateError
from extensions_host.services.quotas import usage_recount
from extensions_host.services.records import check_key

BATCH = 500
# how much of a record key a stop reason quotes (reasons are bounded to 512 characters)
KEY_IN_REASON_MAX = 64
PROBLEM_IN_REASON_MAX = 200
Step = Callable[[dict[str, Any]], list[dict[str, Any]]]


class MigrationFailed(Exception):
    """A migration that cannot produce valid state; its message follows `migration: `."""


def newer_state_reason(*, stored: int, declared: int) -> str:
    return f"state: stored state version {stored} is newer than declared version {declared}"


def state_migrate(*, loaded: LoadedExtension, row: RosterEntry) -> str | None:
    """Bring the extension's stored state to its declared version, updating the ledger fields
    on `row` (the caller saves it). Returns a stop reason, or None when the state is current."""
    declared = loaded.definition.state_version
    stored = row.state_version
    if stored is not None and stored > declared:
        return newer_state_reason(stored=stored, declared=declared)
    if stored is not None and stored < declared:
        try:
            with transaction.atomic():
                rows = _stored_rows(loaded.id)
                try:
                    _swap_in(
                        loaded.id,
                        migrate_records(
                            definition=loaded.definition,
                            from_version=stored,
                            rows=rows,
                        ),
                    )
                finally:
                    rows.close()  # the server-side cursor closes before the savepoint ends
        except MigrationFailed as exc:
            return f"migration: {exc}"
        except (DataError, IntegrityError, UnicodeEncodeError) as exc:
            # the database or its driver refused the output after every check passed (a NUL,
            # a value out of a column's bounds, a constraint; a lone surrogate the driver cannot
            # encode): the savepoint is rolled back and only this extension stops. Anything
            # else (a transient error, a host bug) is the host's and fails the sync.
            first_line = str(exc).strip().split("\n", 1)[0]
            return f"migration: the database refused the migrated records: {first_line}"
    row.state_version = declared
    row.ledger_revision = loaded.revision
    return None


def migrate_records(
    *, definition: Extension, from_version: int, rows: Iterable[tuple[str, str, str]]
) -> Iterable[MigrationStaging]:
    """Apply the steps from `from_version` to each stored `(collection, key, json)` and yield
    staged, re-validated records (lazily: the caller writes them in batches)."""
    steps: list[tuple[int, Step]] = []
    for version in range(from_version, definition.state_version):
        step = definition.migrations.get(version)
        if step is None:
            raise MigrationFailed(f"missing state migration from version {version}")
        steps.append((version, step))
    for collection, key, text in rows:
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise MigrationFailed(f"stored {collection} record {key} is not JSON") from exc
        current: list[Any] = [{"collection": collection, "key": key, "value": value}]
        for version, step in steps:
            produced: list[Any] = []
            for item in current:
                try:
                    result = step(dict(item))
                except Exception as exc:
                    raise MigrationFailed(
                        f"state migration from version {version} failed: {_exception_text(exc)}"
                    ) from exc
                if not isinstance(result, list | tuple):
                    raise MigrationFailed(
                        f"state migration from version {version} must return a list of rows"
                    )
                produced.extend(result)
            current = produced
        for item in current:
            yield _staged(definition, item)


def _staged(definition: Extension, item: Any) -> MigrationStaging:
    if not isinstance(item, dict) or set(item) != {"collection", "key", "value"}:
        raise MigrationFailed("a migrated row must be {collection, key, value}")
    collection, key = item["collection"], item["key"]
    spec = definition.collections.get(collection) if isinstance(collection, str) else None
    if spec is None:
        raise MigrationFailed(f"a migrated record names an undeclared collection {collection!r}")
    key = _checked_key(key, f"a migrated {collection} record key")
    quoted = _quoted(definition.id, repr(key), KEY_IN_REASON_MAX)
    try:
        instance = spec.model.model_validate(item["value"])
        encoded = instance.model_dump_json()
        index = spec.index(instance) if spec.index is not None else None
    except ValidationError as exc:
        raise MigrationFailed(
            f"a migrated {collection} record {quoted} is invalid: "
            f"{_quoted(definition.id, first_validation_problem(exc, max_chars=REASON_MAX))}"
        ) from exc
    except PydanticSerializationError as exc:  # e.g. a lone surrogate: no JSON encoding
        raise MigrationFailed(
            f"a migrated {collection} record {quoted} is invalid: "
            f"{_quoted(definition.id, str(exc))}"
        ) from exc
    except Exception as exc:  # the extension's index function
        raise MigrationFailed(
            f"a migrated {collection} record {quoted} has no valid index: {_exception_text(exc)}"
        ) from exc
    if index is not None:
        index = _checked_key(index, f"a migrated {collection} record index")
    size = len(encoded.encode())
    if size > MAX_RECORD_BYTES:
        raise MigrationFailed(f"a migrated {collection} record exceeds 1 MiB")
    return MigrationStaging(
        extension_id=definition.id,
        collection=collection,
        key=key,
        index=index,
        value=encoded,
        size_bytes=size,
    )


def _quoted(extension_id: str, text: str, limit: int = PROBLEM_IN_REASON_MAX) -> str:
    """A part of a stop reason (a key repr'd, so spaces and quotes read unambiguously; a
    problem), cut so that the reason keeps room for the rest (a key may be 256 chars). Redacted
    before it is cut: a secret cut in two would no longer be recognised whole."""
    return bound_text(redact(text, extension_id), limit)


def _exception_text(exc: BaseException) -> str:
    """`<ErrorType>: <message>`: an extension's exception as a reason names it (a bare `'txt'`
    from a `KeyError` says nothing)."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _checked_key(value: Any, what: str) -> str:
    """`records.check_key` (the bounds a put checks), its violation failing the migration."""
    try:
        return check_key(value, what)
    except StateError as exc:
        raise MigrationFailed(exc.message) from exc


def _stored_rows(extension_id: str) -> Generator[tuple[str, str, str], None, None]:
    # a server-side cursor on PostgreSQL: records are streamed, never all in memory. A
    # generator of our own (the stubs type `iterator()` as a plain Iterator): its `close()`
    # reaches the queryset's iterator through `yield from`, which closes the cursor.
    yield from (
        ExtensionRecord.objects.filter(extension_id=extension_id)
        .order_by("pk")
        .values_list("collection", "key", "value")
        .iterator(chunk_size=BATCH)
    )


def _swap_in(extension_id: str, migrated: Iterable[MigrationStaging]) -> None:
    MigrationStaging.objects.filter(extension_id=extension_id).delete()
    batch: list[MigrationStaging] = []
    try:
        for staged in migrated:
            batch.append(staged)
            if len(batch) >= BATCH:
                MigrationStaging.objects.bulk_create(batch)
                batch = []
        if batch:
            MigrationStaging.objects.bulk_create(batch)
    except IntegrityError as exc:
        raise MigrationFailed("migrated records have duplicate keys") from exc
    ExtensionRecord.objects.filter(extension_id=extension_id).delete()
    record = ExtensionRecord._meta.db_table
    staging = MigrationStaging._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{record}" '  # noqa: S608 (our own table names)
            '("extension_id", "collection", "key", "index", "value", "size_bytes") '
            'SELECT "extension_id", "collection", "key", "index", "value", "size_bytes" '
            f'FROM "{staging}" WHERE "extension_id" = %s',
            [extension_id],
        )
    MigrationStaging.objects.filter(extension_id=extension_id).delete()
    usage_recount(extension_id=extension_id)
