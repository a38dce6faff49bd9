"""`bench/pgbench/emit_statements.sql` (the emit's own statements, run by pgbench beside the
B-artifact-emit row) against the migrated schema: it must keep writing what an emit writes, so a
column the models gain breaks it here rather than in a benchmark run."""

from __future__ import annotations

import os
import subprocess

import pytest
from django.db import connection

from artifacts.models import Event, EventKind, Record
from bench import pg
from bench.artifacts import EMIT_STATEMENTS_SCRIPT, emit_statements_variables, emit_world_prepare
from conversations.models import Conversation

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TRANSACTIONS = 4


def _target() -> pg.Target:
    s = connection.settings_dict
    return pg.Target(
        host=s.get("HOST") or "127.0.0.1",
        port=int(s.get("PORT") or 5432),
        user=s.get("USER") or "postgres",
        password=s.get("PASSWORD") or "",
        dbname=s["NAME"],
    )


def test_the_emit_statements_script_numbers_records_and_events_like_an_emit():
    binary = pg.pgbench_path()
    if binary is None:
        pytest.skip("pgbench is not installed")
    data = emit_world_prepare(world_id="pgbw")
    variables = emit_statements_variables(data)
    world = variables["world"]
    version = Conversation.objects.get(pk=world).version
    defines = [f"-D{name}={value}" for name, value in variables.items()]
    done = subprocess.run(
        [binary, "-n", "-f", str(pg.SCRIPTS / EMIT_STATEMENTS_SCRIPT), *defines,
         "-c", "1", "-t", str(TRANSACTIONS)],
        env={**os.environ, **_target().env()},
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "failed transactions: 0 " in done.stdout

    records = list(Record.objects.filter(world_id=world).order_by("sequence"))
    events = list(Event.objects.filter(world_id=world).order_by("sequence"))
    assert len(records) == TRANSACTIONS
    assert [e.kind for e in events[-TRANSACTIONS:]] == [EventKind.ACTIVATE] * TRANSACTIONS
    # one gap-free sequence over both, each event right after its record
    numbers = sorted([r.sequence for r in records] + [e.sequence for e in events])
    assert numbers == list(range(1, len(numbers) + 1))
    for record in records:
        event = next(e for e in events if e.record_id == record.record_id)
        assert event.sequence == record.sequence + 1
        assert record.operation_id == variables["operation"]
        assert record.request_id == variables["request"]
    # the attempt's running totals advance as an emit's do
    assert [r.output_emits for r in records] == list(range(1, TRANSACTIONS + 1))
    assert records[-1].attempt_bytes == sum(r.payload_bytes for r in records)
    assert Conversation.objects.get(pk=world).version == version + TRANSACTIONS
