"""Collections: records of a declared model, keyed and optionally indexed (spec 02 §4).

Bounds (checked before anything is written): key and index 1..256 characters the database can
store (no NUL, valid Unicode), encoded value ≤ 1 MiB, pages of 1..64 ordered by key with an
`after` cursor and an optional index filter.
Guards (who may write, when) live in the runtime; these functions hold the storage rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import connection
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from core.validation import text_problem
from extensions_host.models import ExtensionRecord
from extensions_host.sdk import MAX_KEY_CHARS, MAX_RECORD_BYTES, Collection, Extension, StateError
from extensions_host.services.quotas import usage_charge

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper

    from extensions_host.runtime.current import Frame

MAX_PAGE = 64


def check_key(value: Any, what: str) -> str:
    """A key, index or cursor within bounds; the one check of records and migrations alike.

    A text the database cannot hold (a NUL on PostgreSQL, a lone surrogate anywhere) is a bound
    violation here, before anything is written, not a driver error (`unavailable`) later."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_CHARS:
        raise StateError("bound", f"{what} must be 1..{MAX_KEY_CHARS} characters")
    problem = text_problem(value)
    if problem is not None:
        raise StateError("bound", f"{what} cannot be stored: {problem}")
    return value


def collection_spec(definition: Extension, name: str) -> Collection[Any]:
    spec = definition.collections.get(name)
    if spec is None:
        raise StateError("bound", f"Collection {name} is not declared")
    return spec


def encode_value(model: type[BaseModel], value: Any, what: str) -> str:
    """The value as validated JSON; anything that would not decode again → `encode`."""
    try:
        candidate = value if isinstance(value, model) else None
        if candidate is None:
            if not isinstance(value, dict):
                raise StateError("encode", f"The {what} does not match its schema")
            candidate = model.model_validate(value)
        encoded = candidate.model_dump_json()
        model.model_validate_json(encoded)
    except (ValidationError, PydanticSerializationError, ValueError, TypeError) as exc:
        raise StateError("encode", f"The {what} does not match its schema") from exc
    return encoded


def decode_value(model: type[BaseModel], text: str, what: str) -> Any:
    try:
        return model.model_validate_json(text)
    except (ValidationError, ValueError) as exc:
        raise StateError("decode", f"Stored {what} is invalid") from exc


def encode_record(spec: Collection[Any], name: str, value: Any) -> tuple[str, str | None, str, int]:
    """(key, index, encoded value, size in bytes) for a value about to be written."""
    encoded = encode_value(spec.model, value, f"{name} record")
    size = len(encoded.encode())
    if size > MAX_RECORD_BYTES:
        raise StateError("bound", f"The {name} record exceeds 1 MiB")
    decoded = spec.model.model_validate_json(encoded)
    key = check_key(spec.key(decoded), "A record key")
    index = spec.index(decoded) if spec.index is not None else None
    if index is not None:
        check_key(index, "A record index")
    return key, index, encoded, size


def record_get(*, extension_id: str, collection: str, spec: Collection[Any], key: str) -> Any:
    check_key(key, "A record key")
    with connection.cursor() as cursor:  # a plain statement: every hook's hottest read
        cursor.execute(
            f"SELECT value FROM {_table()} "  # noqa: S608 (our table name)
            "WHERE extension_id = %s AND collection = %s AND key = %s",
            [extension_id, collection, key],
        )
        found = cursor.fetchone()
    text = None if found is None else found[0]
    return None if text is None else decode_value(spec.model, text, f"{collection} record")


def record_page(
    *,
    extension_id: str,
    collection: str,
    spec: Collection[Any],
    limit: int = MAX_PAGE,
    after: str | None = None,
    index: str | None = None,
) -> list[Any]:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise StateError("bound", f"Page limit must be 1..{MAX_PAGE}")
    rows = ExtensionRecord.objects.filter(extension_id=extension_id, collection=collection)
    if after is not None:
        rows = rows.filter(key__gt=check_key(after, "A page cursor"))
    if index is not None:
        rows = rows.filter(index=check_key(index, "A record index"))
    texts = rows.order_by("key").values_list("value", flat=True)[:limit]
    return [decode_value(spec.model, text, f"{collection} record") for text in texts]


def record_put(*, frame: Frame, collection: str, spec: Collection[Any], value: Any) -> None:
    """Insert or replace the record, its row locked first so the usage delta is exact.

    Two plain statements (the hottest write path of every hook): the lock-read of the record
    alone — never joined to the roster row, which every frame holds `FOR SHARE` — then the
    insert or the update."""
    key, index, encoded, size = encode_record(spec, collection, value)
    table = _table()
    with connection.cursor() as cursor:
        existing = _locked(cursor, frame=frame, collection=collection, key=key)
        if existing is None:
            usage_charge(frame=frame, records=1, size=size)
            cursor.execute(
                f"INSERT INTO {table} "  # noqa: S608
                '(extension_id, collection, key, "index", value, size_bytes) '
                "VALUES (%s, %s, %s, %s, %s, %s)",
                [frame.extension_id, collection, key, index, encoded, size],
            )
            return
        pk, old_size = existing
        usage_charge(frame=frame, records=0, size=size - old_size)
        cursor.execute(
            f'UPDATE {table} SET "index" = %s, value = %s, size_bytes = %s '  # noqa: S608
            "WHERE id = %s",
            [index, encoded, size, pk],
        )


def _table() -> str:
    return connection.ops.quote_name(ExtensionRecord._meta.db_table)


def _locked(
    cursor: CursorWrapper, *, frame: Frame, collection: str, key: str
) -> tuple[int, int] | None:
    """(id, size in bytes) of the record, its row locked until the frame ends (a row another
    frame deleted meanwhile is not found once that frame commits)."""
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    cursor.execute(
        f"SELECT id, size_bytes FROM {_table()} "  # noqa: S608 (our table name)
        f"WHERE extension_id = %s AND collection = %s AND key = %s{lock}",
        [frame.extension_id, collection, key],
    )
    return cursor.fetchone()


def record_remove(*, frame: Frame, collection: str, key: str) -> bool:
    """Delete the record. Its row is locked first (as in `record_put`): of two frames removing
    one key at once, the second waits and then finds nothing, so the usage is charged once."""
    check_key(key, "A record key")
    with connection.cursor() as cursor:
        existing = _locked(cursor, frame=frame, collection=collection, key=key)
        if existing is None:
            return False
        pk, size = existing
        cursor.execute(f"DELETE FROM {_table()} WHERE id = %s", [pk])  # noqa: S608
        if not cursor.rowcount:
            return False
    usage_charge(frame=frame, records=-1, size=-size)
    return True
