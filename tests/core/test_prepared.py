"""The hot paths' cursor and pipeline (`core.db`): statements prepared once per connection on
PostgreSQL, sent together in one round trip, logged as written; plain cursors elsewhere."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from config.settings.base import postgresql_tuned
from core.db import pipelined, prepared_cursor

pytestmark = pytest.mark.django_db

STATEMENT = "SELECT CAST(%s AS integer) * 7 AS seven_times"


def _prepared_here() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_a_prepared_cursor_runs_statements_with_bound_parameters():
    with prepared_cursor(connection) as cursor:
        for n in range(8):
            cursor.execute("SELECT %s || %s", [f"it's {n}", "; DROP TABLE x --"])
            assert cursor.fetchone() == (f"it's {n}; DROP TABLE x --",)


def test_statements_in_a_pipeline_run_in_order_each_seeing_the_ones_before():
    with transaction.atomic():
        with prepared_cursor(connection) as write, prepared_cursor(connection) as read:
            write.execute("CREATE TEMPORARY TABLE pipelined_t (n int)")
            with pipelined(connection):
                write.execute("INSERT INTO pipelined_t VALUES (%s), (%s)", [1, 2])
                read.execute("SELECT count(*), sum(n) FROM pipelined_t")
            assert read.fetchone() == (2, 3)


def test_a_failing_statement_in_a_pipeline_raises_a_django_database_error():
    with pytest.raises(DatabaseError), transaction.atomic():
        with prepared_cursor(connection) as first, prepared_cursor(connection) as second:
            with pipelined(connection):
                first.execute("SELECT n FROM no_such_table WHERE n = %s", [0])
                second.execute("SELECT 1")
    with connection.cursor() as cursor:  # the connection is usable again
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


@pytest.mark.postgres
def test_the_query_log_shows_each_statement_as_written():
    with CaptureQueriesContext(connection) as captured:
        for n in range(8):  # prepared from the 5th run on PostgreSQL: still logged
            with prepared_cursor(connection) as cursor:
                cursor.execute(STATEMENT, [n])
    assert [q["sql"] for q in captured.captured_queries] == [STATEMENT] * 8


@pytest.mark.postgres
def test_postgresql_prepares_a_statement_after_the_connections_threshold():
    connection.ensure_connection()
    threshold = connection.connection.prepare_threshold
    assert threshold == 5  # the settings' default (`postgresql_tuned`)
    with prepared_cursor(connection) as cursor:
        for n in range(threshold + 1):
            cursor.execute(STATEMENT, [n])
            assert cursor.fetchone() == (n * 7,)
    assert [s for s in _prepared_here() if "seven_times" in s]


@pytest.mark.postgres
def test_without_a_threshold_nothing_is_prepared():
    connection.ensure_connection()
    saved = connection.connection.prepare_threshold
    connection.connection.prepare_threshold = None  # DATABASE_PREPARED_STATEMENTS=false
    try:
        with prepared_cursor(connection) as cursor:
            for n in range(10):
                cursor.execute(STATEMENT.replace("7", "11"), [n])
                assert cursor.fetchone() == (n * 11,)
        assert not [s for s in _prepared_here() if "11 AS seven_times" in s]
    finally:
        connection.connection.prepare_threshold = saved


def test_the_settings_turn_prepared_statements_off_on_request(monkeypatch):
    assert postgresql_tuned({})["OPTIONS"] == {"prepare_threshold": 5}
    monkeypatch.setenv("DATABASE_PREPARED_STATEMENTS", "false")
    tuned = postgresql_tuned({"CONN_MAX_AGE": 0})
    assert "prepare_threshold" not in tuned.get("OPTIONS", {})
    assert (tuned["CONN_MAX_AGE"], tuned["CONN_HEALTH_CHECKS"]) == (0, True)
