"""Statements and time per operation on the hot paths, in one process (profiling aid).

    python -m bench.hotpaths [--profile DIR]      # uses BENCH_DATABASE_URL, recreated

For each hot path it prints the SQL statements per operation (Django's query log), the wall
time and the CPU time per operation, so a change to the runtime can be judged by what it
removes. With `--profile DIR` it also writes a pyinstrument tree per path. This is not a
benchmark (no baseline, one process): `make bench` is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    from bench import pg
    from bench.runner import BIG_QUOTAS

    target = pg.Target.from_url(
        os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hyphae_bench")
    )
    pg.database_recreate(target)
    env = {**os.environ, **target.env(), "DJANGO_SETTINGS_MODULE": "bench.settings"}
    for command in (["migrate", "--noinput", "-v", "0"], ["sync_roster"]):
        subprocess.run(
            [sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True,
            capture_output=True,
        )  # fmt: skip
    import django

    django.setup()
    from extensions_host.models import RosterEntry

    RosterEntry.objects.filter(pk__startswith="bench_").update(quotas=BIG_QUOTAS)


def measure(
    name: str, operations: int, run: Callable[[], Any], profile: Path | None
) -> dict[str, Any]:
    from django.db import connection

    profiler = None
    if profile is not None:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0002)
        profiler.start()
    kinds: Counter[str] = Counter()

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        kinds[sql.split(None, 1)[0].upper()] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if profiler is not None:
        profiler.stop()
        profile.mkdir(parents=True, exist_ok=True)
        (profile / f"{name}.txt").write_text(
            profiler.output_text(unicode=True, color=False, show_all=False)
        )
    return {
        "path": name,
        "statements/op": sum(kinds.values()) / operations,
        "wall ms/op": wall * 1000 / operations,
        "cpu ms/op": cpu * 1000 / operations,
        "kinds": dict(kinds.most_common()),
    }


def timers(pages: int, size: int) -> Callable[[], Any]:
    from bench import volume
    from bench.runner import now_ms
    from extensions_host.background.services.timers import timers_fire_page

    volume.timers_insert(
        extension_id="bench_timers", prefix=f"hp{size}-", count=size * pages,
        first_due_ms=now_ms() - 1,
    )  # fmt: skip

    def run() -> None:
        fired = 0
        for _ in range(pages):
            fired += timers_fire_page(limit=size).fired
        assert fired == size * pages, fired

    return run


def timer_set(sets: int, per_transaction: int) -> Callable[[], Any]:
    """`ctx.timers.set` of new keys through `ctx.transact`, as the lateness row arms them."""
    from bench.extensions.timers import arm
    from bench.runner import FAR_FUTURE_MS, now_ms
    from extensions_host.runtime import detached_context

    ctx = detached_context(extension_id="bench_timers", hook="hotpaths arm")
    due = now_ms() + FAR_FUTURE_MS
    planned = [(f"hpset-{i}", due + i) for i in range(sets)]

    def run() -> None:
        for start in range(0, sets, per_transaction):
            chunk = planned[start : start + per_transaction]
            ctx.transact(lambda c, chunk=chunk: arm(c, keys_and_due=chunk))

    return run


def settled(runs: int, batch: int) -> Callable[[], Any]:
    from bench import volume
    from bench.runner import CONSUMER_IDS
    from extensions_host.background.services.settled import PAGE_FRAMES, settled_deliver

    volume.conversations_insert(prefix=f"hp{batch}-", count=10)
    span = volume.settled_runs_insert(
        conversation_prefix=f"hp{batch}-", conversations=10, count=runs
    )
    volume.settled_cursors_set(extension_ids=CONSUMER_IDS, position=span.first - 1)

    def run() -> None:
        for consumer in CONSUMER_IDS:
            while settled_deliver(extension_id=consumer, batch=batch, frames=PAGE_FRAMES):
                pass

    return run


def settled_task(tasks: int) -> Callable[[], Any]:
    """The body of one `deliver_settled` task after each settle: one new run, one consumer."""
    from bench import volume
    from bench.runner import CONSUMER_IDS
    from extensions_host.background.services.settled import settled_deliver_all

    prefix = "hptask-"
    volume.conversations_insert(prefix=prefix, count=1)
    span = volume.settled_runs_insert(conversation_prefix=prefix, conversations=1, count=2)

    def run() -> None:
        for _ in range(tasks):
            # one run behind each time: the cursor is moved back to just before the last run
            volume.settled_cursors_set(extension_ids=CONSUMER_IDS[:1], position=span.last - 1)
            settled_deliver_all(extension_id=CONSUMER_IDS[0])

    return run


def settle(runs: int) -> Callable[[], Any]:
    """`run_settle` of claimed runs, with its after-commit steps (kicks, task sends)."""
    from bench import volume
    from bench.runner import CONSUMER_IDS
    from conversations.services import run_settle
    from extensions_host.background.services.settled import core_cursor

    run_ids = volume.claimed_runs_insert(conversation_prefix="hpsettle", count=runs)
    volume.settled_cursors_set(extension_ids=CONSUMER_IDS, position=core_cursor())

    def run() -> None:
        for run_id in run_ids:
            run_settle(run_id=run_id, status="unanswered", reason="hotpaths")

    return run


def api(path: str, requests: int) -> Callable[[], Any]:
    """In-process requests through the whole Django stack (test client, no network)."""
    from django.test import Client

    from bench import volume
    from bench.runner import api_requests, seed_projection_records

    volume.conversations_insert(prefix="hpproj", count=1)
    seed_projection_records("hpproj0")
    calls = api_requests(Client(), "hpproj0")
    call = calls[path]
    for i in range(5):
        call(i)  # warm

    def run() -> None:
        for i in range(requests):
            response = call(i % 50)
            assert response.status_code == 200, response.content[:300]

    return run


def artifact_emit(emits: int) -> Callable[[], Any]:
    """`artifact_emit` into one world, as `bench/drive.py emit` calls it (one process)."""
    from artifacts.services import artifact_emit as emit
    from bench.artifacts import emit_world_prepare, request_context_from

    context = request_context_from(emit_world_prepare(world_id="hpworld"))
    for i in range(5):  # warm (the first call builds the per-process SQL)
        emit(context=context, output="panel", payload=f"warm {i}", tool_call_id=f"warm-{i}")

    def run() -> None:
        for i in range(emits):
            result = emit(
                context=context, output="panel", payload=f"hp artifact {i}", tool_call_id=f"hp-{i}"
            )
            assert result.ok and not result.idempotent, result

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--only", default="", help="run only the paths whose name contains this")
    args = parser.parse_args(argv)
    _setup()
    from extensions_host.background.services.timers import PAGE

    paths: list[tuple[str, int, Callable[[], Callable[[], Any]]]] = [
        ("timer-fire (pages of 64)", PAGE * 10, lambda: timers(10, PAGE)),
        ("timer-fire (pages of 6)", 6 * 50, lambda: timers(50, 6)),
        ("timer-set (64 per transact)", 640, lambda: timer_set(640, 64)),
        ("settled-batch-1 (per run·consumer)", 40 * 10, lambda: settled(40, 1)),
        ("settled-batch-64 (per run·consumer)", 640 * 10, lambda: settled(640, 64)),
        ("settled-task (1 new run, 1 consumer)", 200, lambda: settled_task(200)),
        ("settle (with its after-commit kicks)", 200, lambda: settle(200)),
        ("api-bare-view", 200, lambda: api("api-bare-view", 200)),
        ("api-command", 200, lambda: api("api-command", 200)),
        ("api-projection (20 slots)", 50, lambda: api("projection", 50)),
        ("artifact-emit", 500, lambda: artifact_emit(500)),
    ]
    results = [
        measure(name, operations, make(), args.profile)
        for name, operations, make in paths
        if args.only in name
    ]
    for row in results:
        print(
            f"{row['path']:<40} {row['statements/op']:6.2f} stmts  "
            f"{row['wall ms/op']:7.3f} ms wall  {row['cpu ms/op']:7.3f} ms cpu  {row['kinds']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
