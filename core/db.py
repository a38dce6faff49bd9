"""Which database errors are transient trouble of the server or the connection (a retry, or a
503 with `Retry-After`), never the caller's fault."""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError

# serialization_failure, deadlock_detected, lock_not_available (lock_timeout)
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03"})
QUERY_CANCELED = "57014"  # statement_timeout: the frame's deadline, not a transient error
BIGINT_MAX = 2**63 - 1  # the largest PostgreSQL bigint (ids, sequences, millisecond instants)


def sqlstate(exc: BaseException) -> str | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if code:
            return str(code)
        current = current.__cause__ or current.__context__
    return None


def is_statement_timeout(exc: BaseException) -> bool:
    return isinstance(exc, DatabaseError) and sqlstate(exc) == QUERY_CANCELED


def is_transient(exc: BaseException) -> bool:
    """Serialization failures, deadlocks, lock timeouts, a lost connection, SQLite's busy lock."""
    if isinstance(exc, InterfaceError):
        return True  # the connection is gone
    if not isinstance(exc, DatabaseError):
        return False
    code = sqlstate(exc)
    if code is not None:
        return code in TRANSIENT_SQLSTATES or code.startswith("08")
    if isinstance(exc, OperationalError):
        text = str(exc).lower()
        return any(
            marker in text
            for marker in ("database is locked", "connection", "server closed", "terminating")
        )
    return False


def drop_column_indexes(schema_editor: Any, table: str, column: str) -> None:
    """Drop the plain indexes on `column` alone (a migration step: the index a `ForeignKey`
    makes by default, and its `_like` twin on PostgreSQL), leaving unique, primary-key and
    multi-column indexes alone. Unlike `AlterField`, it does not drop and re-validate the
    foreign key, which on a big table scans every row under an exclusive lock."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    for name, info in constraints.items():
        plain = info["index"] and not (info["unique"] or info["primary_key"])
        if plain and info["columns"] == [column]:
            schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")
