"""The tool-call hot path's two reads, as SQL written once per process.

`emit` must cost about what an INSERT costs (spec 08's benchmark). Compiling the equivalent
ORM query (six correlated subqueries) took several times longer than running it, so the world
lock and the decision read of `emit`/`clear` are built once from the models' own table and
column names, in SQL that SQLite and PostgreSQL both run, executed with bound parameters.
Identifiers come only from model metadata, never from input. Everything else uses the ORM.
"""

from __future__ import annotations

import functools

from django.db import connection

from artifacts.models import Event, Operation, Record, World


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _column(model: type, field: str) -> str:
    return _q(model._meta.get_field(field).column)  # type: ignore[attr-defined]


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


_OPERATION_FIELDS = tuple(Operation._meta.concrete_fields)


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
    columns = ", ".join(f"o.{_q(f.column)}" for f in _OPERATION_FIELDS)
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


def read_for_call(
    *,
    world_id: str,
    operation_id: str,
    tool_call_id: str,
    request_id: str,
    request_attempt: int,
    output: str,
) -> Operation | None:
    """The operation, annotated with what a tool call decides on (run under the world lock):

    - `previous_record`: pk of this operation's record with this tool-call id, or None;
    - `previous_call`: call fingerprint of its clear/ignored_call with this id, or None;
    - `attempt_bytes`, `output_emits`: the request attempt's running totals so far;
    - `last_record_sequence`, `last_event_sequence`: the world's highest sequences.

    Every subquery is one probe of an index (`artifact_record_tool_call`,
    `artifact_event_tool_call`, `artifact_record_attempt_idx`, `artifact_record_output_idx`
    and the two `(world, sequence)` unique indexes).
    """
    params = [
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
    # raw() applies each backend's converters (SQLite booleans, datetimes, JSON) to the fields
    # and sets the extra columns as attributes.
    found = list(Operation.objects.raw(_call_read_sql(connection.vendor), params))
    return found[0] if found else None
