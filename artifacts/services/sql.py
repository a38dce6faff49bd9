"""The tool-call hot path's statements, as SQL written once per process.

`emit` must cost about what an INSERT costs (spec 08's benchmark, B-artifact-emit). Compiling
the equivalent ORM queries took several times longer than running them, and every round trip
between the world lock and the commit is one that the world's other emitters wait for. So the
world lock, the decision read of `emit`/`clear` and the writes of a world mutation are built
once per process from the models' own table and column names and executed with bound
parameters; identifiers come only from model metadata, never from input. Everything else uses
the ORM.

Two vendor branches, each covered by the test suite on both vendors: on PostgreSQL the lock and
the read share one round trip (`lock_and_read_for_call`) and the writes are one statement
(`rows_write`); SQLite, in-process, runs them one by one.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model
from django.utils import timezone

from artifacts.models import Event, Operation, Record, World
from conversations.services.common import touch_sql


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _column(model: type[Model], field: str) -> str:
    found = model._meta.get_field(field)
    assert isinstance(found, Field) and found.column, f"{model.__name__}.{field} is no column"
    return _q(found.column)


# --- the world lock -----------------------------------------------------------------------------


@functools.cache
def _lock_sql(vendor: str) -> str:
    suffix = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return (
        f"SELECT 1 FROM {_q(World._meta.db_table)} "  # noqa: S608 (identifiers from models)
        f"WHERE {_column(World, 'conversation')} = %s{suffix}"
    )


def lock_world(world_id: str) -> bool:
    """Lock a world's row until the transaction ends; False when the world has no row.

    On SQLite there is no row lock: its IMMEDIATE transactions already serialise writers.
    """
    with connection.cursor() as cursor:
        cursor.execute(_lock_sql(connection.vendor), [world_id])
        return cursor.fetchone() is not None


# --- the decision read of a tool call ---------------------------------------------------------

# What a tool call looks at of its operation (identity, state, attempts). The other columns
# stay deferred on the instance: touching one loads it, and a save writes only loaded fields.
_OPERATION_FIELDS = (
    "id",
    "world_id",
    "parent_head",
    "preset_id",
    "preset_revision",
    "preset_scripts_enabled",
    "status",
    "followup_status",
    "projection_status",
    "head",
    "request_attempts",
)
_BOOLEAN = _OPERATION_FIELDS.index("preset_scripts_enabled")  # SQLite answers 0/1
_JSON = _OPERATION_FIELDS.index("request_attempts")


@dataclass(frozen=True, slots=True)
class CallRead:
    """What a tool call decides on, read under the world lock (`lock_and_read_for_call`)."""

    operation: Operation
    previous_record: int | None  # pk of this operation's record with this tool-call id
    previous_call: str | None  # call fingerprint of its clear/ignored_call with this id
    attempt_bytes: int  # the request attempt's running totals so far
    output_emits: int
    last_sequence: int  # the world's highest sequence over records and events


@functools.cache
def _call_read_sql(vendor: str) -> str:
    op, rec, ev = (_q(m._meta.db_table) for m in (Operation, Record, Event))
    o_id = _column(Operation, "id")
    r = {f: _column(Record, f) for f in (
        "id", "operation", "tool_call_id", "request_id", "request_attempt", "output",
        "sequence", "world", "attempt_bytes", "output_emits",
    )}  # fmt: skip
    e = {f: _column(Event, f) for f in ("operation", "tool_call_id", "world", "sequence")}
    e["call_fingerprint"] = _column(Event, "call_fingerprint")
    attempt = (
        f"FROM {rec} r WHERE r.{r['operation']} = o.{o_id} AND r.{r['request_id']} = %s "
        f"AND r.{r['request_attempt']} = %s"
    )
    column_of = {f.attname: f.column for f in Operation._meta.concrete_fields}
    columns = ", ".join(f"o.{_q(column_of[name])}" for name in _OPERATION_FIELDS)
    return f"""
SELECT {columns},
  (SELECT r.{r["id"]} FROM {rec} r
    WHERE r.{r["operation"]} = o.{o_id} AND r.{r["tool_call_id"]} = %s) AS previous_record,
  (SELECT e.{e["call_fingerprint"]} FROM {ev} e
    WHERE e.{e["operation"]} = o.{o_id} AND e.{e["tool_call_id"]} = %s
      AND e.{e["tool_call_id"]} <> '') AS previous_call,
  COALESCE((SELECT r.{r["attempt_bytes"]} {attempt}
    ORDER BY r.{r["sequence"]} DESC LIMIT 1), 0) AS attempt_bytes,
  COALESCE((SELECT r.{r["output_emits"]} {attempt} AND r.{r["output"]} = %s
    ORDER BY r.{r["sequence"]} DESC LIMIT 1), 0) AS output_emits,
  COALESCE((SELECT r.{r["sequence"]} FROM {rec} r WHERE r.{r["world"]} = %s
    ORDER BY r.{r["sequence"]} DESC LIMIT 1), 0) AS last_record_sequence,
  COALESCE((SELECT e.{e["sequence"]} FROM {ev} e WHERE e.{e["world"]} = %s
    ORDER BY e.{e["sequence"]} DESC LIMIT 1), 0) AS last_event_sequence
FROM {op} o WHERE o.{o_id} = %s"""  # noqa: S608 (identifiers from models)


def _json(value: Any) -> Any:
    # Django loads jsonb as text on PostgreSQL (its JSONField parses it), like SQLite's text
    return json.loads(value) if isinstance(value, str | bytes) else value


@functools.cache
def _one_round_trip(vendor: str, cursor_class: type) -> bool:
    """Whether this cursor runs several statements in one `execute`, each on its own snapshot:
    psycopg's client-side binding cursor (Django's default on PostgreSQL; not with the
    `server_side_binding` option), which sends them as one simple query."""
    if vendor != "postgresql":
        return False
    from psycopg import ClientCursor

    return issubclass(cursor_class, ClientCursor)


def lock_and_read_for_call(
    *,
    world_id: str,
    operation_id: str,
    tool_call_id: str,
    request_id: str,
    request_attempt: int,
    output: str,
) -> tuple[bool, CallRead | None]:
    """Lock the world (`lock_world`), then read the operation and what a tool call decides on
    in one statement: (False, None) when the world has no row, (True, None) when it has no
    such operation.

    On PostgreSQL both statements go in one round trip. That is safe because in READ COMMITTED
    each statement of a multi-statement query takes its own snapshot when it starts, and the
    read starts only once the lock is granted: it sees every commit the lock waited for. That
    round trip saved is one the world's other emitters no longer wait for.

    Every subquery is one probe of an index (`artifact_record_tool_call`,
    `artifact_event_tool_call`, `artifact_record_attempt_idx`, `artifact_record_output_idx`
    and the two `(world, sequence)` unique indexes).
    """
    # `connection` resolves the thread's connection on every attribute: once per call here
    db: BaseDatabaseWrapper = connections[DEFAULT_DB_ALIAS]
    vendor = db.vendor
    params: list[Any] = [
        tool_call_id,
        tool_call_id,
        request_id,
        request_attempt,
        request_id,
        request_attempt,
        output,
        world_id,
        world_id,
        operation_id,
    ]
    with db.cursor() as cursor:
        # a class is hashable (the cache's key); the stubs' `type[Any]` hides that
        if _one_round_trip(vendor, type(cursor.cursor)):  # type: ignore[arg-type]
            cursor.execute(f"{_lock_sql(vendor)};{_call_read_sql(vendor)}", [world_id, *params])
            locked = cursor.fetchone() is not None
            cursor.nextset()
        else:
            cursor.execute(_lock_sql(vendor), [world_id])
            locked = cursor.fetchone() is not None
            if locked:
                cursor.execute(_call_read_sql(vendor), params)
        row = cursor.fetchone() if locked else None
    if row is None:
        return locked, None
    values = list(row[: len(_OPERATION_FIELDS)])
    values[_BOOLEAN] = bool(values[_BOOLEAN])
    values[_JSON] = _json(values[_JSON])
    # from_db: a loaded instance, its other fields deferred (never written back as defaults)
    operation = Operation.from_db(db.alias, _OPERATION_FIELDS, values)
    previous_record, previous_call, attempt_bytes, output_emits, last_record, last_event = row[
        len(_OPERATION_FIELDS) :
    ]
    return True, CallRead(
        operation=operation,
        previous_record=previous_record,
        previous_call=previous_call,
        attempt_bytes=attempt_bytes,
        output_emits=output_emits,
        last_sequence=max(last_record, last_event),
    )


# --- the writes of a world mutation -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Insert:
    """An INSERT of one model's rows: its columns and how each value is prepared."""

    table: str  # quoted
    columns: str  # quoted, comma-separated
    attnames: tuple[str, ...]
    # fields whose value the driver does not take as is (datetimes on SQLite)
    prepared: tuple[tuple[int, Field], ...]

    def values(self, instance: Model, db: BaseDatabaseWrapper) -> list[Any]:
        """The row's values, as `db`'s driver takes them."""
        values = [getattr(instance, name) for name in self.attnames]
        for index, field in self.prepared:
            values[index] = field.get_db_prep_save(values[index], db)
        return values


_PLAIN_TYPES = frozenset(
    {
        "BigIntegerField",
        "BooleanField",
        "CharField",
        "ForeignKey",
        "IntegerField",
        "PositiveBigIntegerField",
        "PositiveIntegerField",
        "TextField",
    }
)


@functools.cache
def _insert(model: type[Model]) -> _Insert:
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    return _Insert(
        table=_q(model._meta.db_table),
        columns=", ".join(_q(f.column) for f in fields),
        attnames=tuple(f.attname for f in fields),
        prepared=tuple(
            (index, f)
            for index, f in enumerate(fields)
            if f.get_internal_type() not in _PLAIN_TYPES
        ),
    )


def _rows_sql(insert: _Insert, rows: int) -> str:
    row = "(" + ", ".join(["%s"] * len(insert.attnames)) + ")"
    values = ", ".join([row] * rows)
    return f"INSERT INTO {insert.table} ({insert.columns}) VALUES {values}"  # noqa: S608


# The two statement caches are keyed by a row count (1 to a page of 1,000 events): bounded, so
# that a long-lived process keeps the few counts it uses, not every count it ever met (~280 MB).
_STATEMENTS_CACHED = 64


@functools.lru_cache(maxsize=_STATEMENTS_CACHED)
def _insert_sql(model: type[Model], rows: int, returning: bool) -> str:
    sql = _rows_sql(_insert(model), rows)
    return f"{sql} RETURNING {_column(model, 'id')}" if returning else sql


@functools.cache
def _state_sql(vendor: str) -> str:
    """The world's `state_version` + 1 (the world row is already locked by the caller)."""
    version = _column(World, "state_version")
    return (
        f"UPDATE {_q(World._meta.db_table)} SET {version} = {version} + 1 "  # noqa: S608
        f"WHERE {_column(World, 'conversation')} = %s"
    )


@functools.lru_cache(maxsize=_STATEMENTS_CACHED)
def _write_sql(record: bool, events: int, touch: bool, state: bool) -> str:
    """PostgreSQL: the record, `events` event rows, the version bump and the world's state
    version bump in one statement. Each part is a data-modifying CTE (each is applied whatever
    the final SELECT reads), answering (record pk, conversations touched)."""
    parts = []
    if record:
        parts.append(f"r AS ({_insert_sql(Record, 1, True)})")
    if events:
        parts.append(f"e AS ({_insert_sql(Event, events, False)})")
    if touch:
        parts.append(f"c AS ({touch_sql()} RETURNING 1)")
    if state:
        parts.append(f"w AS ({_state_sql('postgresql')})")
    answer_pk = f"(SELECT {_column(Record, 'id')} FROM r)" if record else "NULL"  # noqa: S608
    answer_touched = "(SELECT count(*) FROM c)" if touch else "0"
    return f"WITH {', '.join(parts)} SELECT {answer_pk}, {answer_touched}"


# Event rows per INSERT: under SQLite's bound-parameter limit; on PostgreSQL a bound that a
# flush reaches only when it supersedes that many records at once.
_PAGE_POSTGRESQL = 1000


def rows_write(
    *,
    record: Record | None,
    events: Sequence[Event],
    touch: str | None,
    state_version: str | None = None,
) -> bool:
    """Insert `record` (setting its pk) and `events`, bump the version of conversation
    `touch` (an increment under its row lock: what `conversation_touch` writes) and the
    `state_version` of world `state_version` (locked by the caller). True when the
    conversation was touched.

    PostgreSQL: one statement (`_write_sql`) for up to a page of events. SQLite has no
    data-modifying CTEs and runs in-process: one statement per table and page."""
    if record is None and not events and touch is None and state_version is None:
        return False
    now = timezone.now()
    for instance in (record, *events):
        if instance is not None:
            instance.created_at = now
    db: BaseDatabaseWrapper = connections[DEFAULT_DB_ALIAS]
    ev = _insert(Event)
    size = (
        _PAGE_POSTGRESQL
        if db.vendor == "postgresql"
        # a backend without a bound on parameters takes PostgreSQL's page
        else (db.features.max_query_params or _PAGE_POSTGRESQL) // len(ev.attnames)
    )
    pages = [events[start : start + size] for start in range(0, len(events), size)]
    pk, touched = None, False
    with db.cursor() as cursor:
        if db.vendor == "postgresql":
            first = pages.pop(0) if pages else []
            params = [] if record is None else _insert(Record).values(record, db)
            params += [value for event in first for value in ev.values(event, db)]
            if touch is not None:
                params.append(touch)
            if state_version is not None:
                params.append(state_version)
            sql = _write_sql(
                record is not None, len(first), touch is not None, state_version is not None
            )
            cursor.execute(sql, params)
            pk, count = cursor.fetchone()
            touched = count > 0
        elif record is not None:
            cursor.execute(_insert_sql(Record, 1, False), _insert(Record).values(record, db))
            pk = cursor.lastrowid  # (RETURNING needs SQLite 3.35)
        for page in pages:
            rows = [value for event in page for value in ev.values(event, db)]
            cursor.execute(_insert_sql(Event, len(page), False), rows)
        if touch is not None and db.vendor != "postgresql":
            cursor.execute(touch_sql(), [touch])
            touched = cursor.rowcount > 0
        if state_version is not None and db.vendor != "postgresql":
            cursor.execute(_state_sql(db.vendor), [state_version])
    if record is not None:
        record.pk = pk
        record._state.adding = False
        record._state.db = db.alias
    return touched
