"""`make bench`: every row of the spec 08 performance table beside its baseline, in one run.

    make bench                  # full run (BENCH_SECONDS per measurement, default 15)
    make bench BENCH_QUICK=1    # development: 3 s per measurement, 100k instead of 1M volume

The runner (re)creates its own PostgreSQL database (`BENCH_DATABASE_URL`), migrates it, syncs
the roster with the bench extensions, then measures, in this order so that no phase disturbs
another:

1. pgbench baselines on the same server: single-row UPDATE, single INSERT, a SKIP LOCKED claim;
2. throughput rows with two worker processes (`bench.drive`) calling the services the Celery
   task bodies call: timers, settled delivery (unbatched and batched), artifact emits;
3. B-scale at the base volume (10k timers, 10k runs), in this process;
4. a real Celery worker (prefork, 2) and beat on Redis: the no-op task round trip, timer
   lateness at half the measured max, settle→consumer commit latency at 200 runs/s;
5. the volume grown to 1M timers and 1M runs (set-based SQL), B-scale and lateness again;
6. the API under gunicorn (2 sync workers) loaded from a second process (`bench.loadgen`):
   the bare Django view and the command, at max and at half max; the projection of 20
   extensions.

A row whose feature is missing from the tree prints `not available: <what is missing>`; a row
that failed prints `failed: <why>` (and the exit status is 1). Figures are never invented.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import pg
from bench.artifacts import EMIT_STATEMENTS_SCRIPT
from bench.procs import PYTHON, ROOT, BenchError, Processes, run_json, run_many_json, wait_until
from bench.report import (
    RESULTS_DIR,
    Line,
    render_table,
    report_data,
    results_path,
    summary,
    unavailable,
    write_report,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/hyphae_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/7"
FAR_FUTURE_MS = 86_400_000  # stored volume is due a day from now: it never fires in a run
SETTLE_RATE = 200.0  # spec 08: settle→consumer commit p99 at 200 runs/s
BIG_QUOTAS = {"max_records": 10**9, "max_bytes": 10**13, "max_timers": 10**9}
LOADGEN_CONCURRENCY = 4  # 2 gunicorn workers × 2: both stay busy, the queue stays short
API_ROUNDS = 3  # the bare view and the command alternate, BENCH_SECONDS / 3 each per round
CONSUMER_IDS = [f"bench_c{i:02d}" for i in range(10)]
# the baselines, each a `bench/pgbench` script run by 2 clients
PGBENCH_SCRIPTS = {
    "pgbench_update": "update.sql",
    "pgbench_insert": "insert.sql",
    "pgbench_claim": "claim.sql",
    "pgbench_insert_locked": "insert_locked.sql",
}
PROFILE_CALLS, PROFILE_SECONDS = 300, 5.0  # per profiled API case


@dataclass
class Config:
    seconds: float = 15.0
    quick: bool = False
    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str = DEFAULT_REDIS_URL
    scale_base: int = 10_000
    scale_max: int = 1_000_000
    port: int = 8765
    profile: bool = False
    keep_db: bool = False

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Config:
        quick = env.get("BENCH_QUICK", "") not in {"", "0", "false", "no"}
        seconds = float(env.get("BENCH_SECONDS") or (3 if quick else 15))
        scale_max = int(env.get("BENCH_SCALE_MAX") or (100_000 if quick else 1_000_000))
        config = cls(
            seconds=seconds,
            quick=quick,
            database_url=env.get("BENCH_DATABASE_URL") or DEFAULT_DATABASE_URL,
            redis_url=env.get("BENCH_REDIS_URL") or DEFAULT_REDIS_URL,
            scale_max=scale_max,
            port=int(env.get("BENCH_PORT") or 8765),
            profile=env.get("BENCH_PROFILE", "") not in {"", "0", "false", "no"},
            keep_db=env.get("BENCH_KEEP_DB", "") not in {"", "0", "false", "no"},
        )
        if not 1 <= config.seconds <= 120:
            raise SystemExit("BENCH_SECONDS must be within 1..120")
        if config.scale_max < config.scale_base * 2:
            raise SystemExit(f"BENCH_SCALE_MAX must be at least {config.scale_base * 2}")
        return config


@dataclass
class State:
    lines: list[Line] = field(default_factory=list)
    baselines: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    scale: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    lateness: dict[int, dict[str, Any]] = field(default_factory=dict)
    timer_rate: float | None = None
    failed: bool = False


class Bench:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.target = pg.Target.from_url(config.database_url)
        self.state = State()
        self.started = dt.datetime.now(dt.UTC)
        self.work = Path(tempfile.mkdtemp(prefix="hyphae-bench-"))
        self.profiles = RESULTS_DIR / f"profiles-{self.started:%Y-%m-%d}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "BENCH_DATABASE_URL": config.database_url,
            "BENCH_REDIS_URL": config.redis_url,
            "PYTHONUNBUFFERED": "1",
        }
        os.environ.update(self.env)
        self.procs = Processes(self.env, self.work / "logs")
        self.machine: dict[str, Any] = {}

    # --- plumbing ------------------------------------------------------------------------

    def say(self, text: str) -> None:
        elapsed = (dt.datetime.now(dt.UTC) - self.started).total_seconds()
        print(f"[{elapsed:6.1f}s] {text}", flush=True)

    def add(self, line: Line) -> None:
        self.state.lines.append(line)
        shown = line.unavailable or f"{line.value!r} {line.unit}"
        self.say(f"  {line.row} · {line.metric}: {shown}")

    @contextmanager
    def phase(self, name: str, rows: list[tuple[str, str]]) -> Iterator[None]:
        """Run a phase; if it raises, each of its rows not yet reported says why."""
        self.say(name)
        before = len(self.state.lines)
        try:
            yield
        except Exception as exc:
            reported = {(line.row, line.metric) for line in self.state.lines[before:]}
            if isinstance(exc, FeatureMissing):
                why = f"not available: {exc}"[:300]
            else:
                self.state.failed = True
                why = f"failed: {type(exc).__name__}: {exc}"[:300]
            with (self.work / "errors.log").open("a") as log:
                log.write(traceback.format_exc())
            for row, metric in rows:
                if (row, metric) not in reported:
                    self.add(Line(row=row, metric=metric, unavailable=why))
        finally:
            self.procs.stop_all()

    def drive(self, kind: str, *extra: str, profile: str | None = None) -> list[str]:
        args = [PYTHON, "-m", "bench.drive", kind, *extra]
        if profile and self.config.profile:
            self.profiles.mkdir(parents=True, exist_ok=True)
            args += ["--profile", str(self.profiles / f"{profile}.txt")]
        return args

    def two_workers(self, commands: list[list[str]]) -> tuple[list[dict[str, Any]], float]:
        """Run the driver commands at once (common start instant); results and the span."""
        results = run_many_json(commands, env=self.env, timeout=self.config.seconds + 120)
        missing = [r["unavailable"] for r in results if "unavailable" in r]
        if missing:
            raise FeatureMissing(missing[0])
        span = max(r["ended"] for r in results) - min(r["started"] for r in results)
        return results, max(span, 1e-6)

    def start_at(self) -> str:
        return str(time.time() + 4.0)  # Django start-up of the drivers is not measured

    # --- the run -------------------------------------------------------------------------

    def run(self) -> int:
        self.say(f"bench: {asdict(self.config) | {'database_url': self.target.dbname}}")
        try:
            self.setup()
            self.phase_pgbench()
            self.phase_base_volume()
            self.phase_timer_throughput()
            self.phase_settled_throughput()
            self.phase_artifact_emit()
            self.phase_scale(self.config.scale_base)
            self.phase_celery(self.config.scale_base, settle_latency=True)
            self.phase_grow()
            self.phase_scale(self.config.scale_max)
            self.phase_celery(self.config.scale_max, settle_latency=False)
            self.summarise_scale()
            self.phase_api()
            if self.config.profile:
                self.phase_profile_api()
        finally:
            self.procs.stop_all()
            if not self.config.keep_db:
                self.close_django()
                pg.database_drop(self.target)
        return self.finish()

    def setup(self) -> None:
        self.say(f"database {self.target.dbname}: recreate, migrate, sync roster")
        pg.database_recreate(self.target)
        for command in (["migrate", "--noinput", "-v", "0"], ["sync_roster"]):
            subprocess.run(
                [PYTHON, "manage.py", *command],
                cwd=ROOT,
                env=self.env,
                check=True,
                capture_output=True,
            )
        import django

        django.setup()
        from bench.extensions import probe
        from extensions_host.models import RosterEntry

        self.machine = machine_info(self.target)
        probe.client().flushdb()
        RosterEntry.objects.filter(pk__startswith="bench_").update(quotas=BIG_QUOTAS)
        stopped = list(
            RosterEntry.objects.filter(pk__startswith="bench_").exclude(status="running")
        )
        if stopped:
            raise BenchError(f"bench extensions not running after sync: {stopped}")

    def close_django(self) -> None:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: S110 (Django never set up: nothing to close)
            pass

    # --- 1. pgbench ----------------------------------------------------------------------

    def phase_pgbench(self) -> None:
        with self.phase("pgbench baselines (same server, 2 clients)", []):
            if pg.pgbench_path() is None:
                self.state.notes.append("pgbench is not installed: ratios to it are missing")
                return
            seconds = self.config.seconds
            pg.pgbench_prepare(self.target, queue_rows=int(max(200_000, 15_000 * seconds)))
            for name, script in PGBENCH_SCRIPTS.items():
                result = pg.pgbench_run(self.target, script=script, clients=2, seconds=seconds)
                self.state.baselines[name] = result
                self.say(f"  {name}: {result['tps']:,.0f} tps")
            if pg.queue_remaining(self.target) == 0:
                self.state.notes.append("the claim queue ran empty: pgbench_claim is too high")

    def tps(self, name: str) -> float | None:
        value = self.state.baselines.get(name)
        return None if value is None else float(value["tps"])

    def adjacent_tps(self, name: str, row: str) -> float | None:
        """The pgbench baseline again, right before a row's measurement: on a machine shared
        with other work the server's capacity drifts, so the ratio uses the figure taken
        seconds before (the first-phase figure is kept in the report too)."""
        if pg.pgbench_path() is None or name not in self.state.baselines:
            return self.tps(name)
        result = pg.pgbench_run(
            self.target, script=PGBENCH_SCRIPTS[name], clients=2, seconds=self.config.seconds
        )
        self.state.baselines.setdefault("adjacent", {})[f"{name} before {row}"] = result
        self.say(f"  {name} (adjacent): {result['tps']:,.0f} tps")
        return float(result["tps"])

    # --- volume --------------------------------------------------------------------------

    def phase_base_volume(self) -> None:
        with self.phase(f"stored volume: {self.config.scale_base:,} timers and runs", []):
            from bench import volume

            volume.conversations_insert(prefix="benchvol", count=100)
            if missing_timers() is None:
                volume.timers_insert(
                    extension_id="bench_pending",
                    prefix="pend-",
                    count=self.config.scale_base,
                    first_due_ms=now_ms() + FAR_FUTURE_MS,
                    spacing_ms=1.0,
                )
            if missing_settled() is None:
                span = volume.settled_runs_insert(
                    conversation_prefix="benchvol", conversations=100, count=self.config.scale_base
                )
                volume.settled_cursors_set(extension_ids=CONSUMER_IDS, position=span.last)
            vacuum_analyze()

    def phase_grow(self) -> None:
        extra = self.config.scale_max - self.config.scale_base
        with self.phase(f"stored volume: growing to {self.config.scale_max:,}", []):
            from bench import volume

            started = time.perf_counter()
            if missing_timers() is None:
                volume.timers_insert(
                    extension_id="bench_pending",
                    prefix="pend2-",
                    count=extra,
                    first_due_ms=now_ms() + FAR_FUTURE_MS,
                    spacing_ms=0.05,
                )
            if missing_settled() is None:
                from conversations.models import Run

                stored = Run.objects.filter(status="settled").count()
                span = volume.settled_runs_insert(
                    conversation_prefix="benchvol",
                    conversations=100,
                    count=max(self.config.scale_max - stored, 0),
                )
                volume.settled_cursors_set(extension_ids=CONSUMER_IDS, position=span.last)
            vacuum_analyze()
            self.say(f"  generated in {time.perf_counter() - started:.1f}s")

    # --- 2. throughput with two worker processes -----------------------------------------

    def phase_timer_throughput(self) -> None:
        row = ("B-timer-throughput", "due timers fired/s, 2 workers")
        with self.phase("timer throughput (2 worker processes)", [row]):
            missing = missing_timers()
            if missing:
                self.add(unavailable(*row, missing))
                return
            from bench import volume

            count = int(min(6000 * self.config.seconds, 400_000))
            volume.timers_insert(
                extension_id="bench_timers",
                prefix="thr-",
                count=count,
                first_due_ms=now_ms() - 60_000,
            )
            vacuum_analyze()
            update = self.adjacent_tps("pgbench_update", row[0])
            start = self.start_at()
            seconds = str(self.config.seconds)
            results, span = self.two_workers(
                [
                    self.drive("timers", "--start-at", start, "--seconds", seconds,
                               profile="timers-worker"),
                    self.drive("timers", "--start-at", start, "--seconds", seconds),
                ]
            )  # fmt: skip
            fired = sum(r["fired"] for r in results)
            stops = sum(r["stopped"] for r in results)
            check_running("bench_timers")
            rate = fired / span
            self.state.timer_rate = rate
            self.add(
                Line(
                    *row,
                    value=rate,
                    unit="/s",
                    baseline="pgbench UPDATE",
                    baseline_value=update,
                    baseline_unit="tps",
                    kind="ratio",
                    goal=0.5,
                    details={"fired": fired, "seconds": span, "stops": stops,
                             "pages": sum(r["pages"] for r in results)},
                )
            )  # fmt: skip
            self.add(
                Line(
                    row[0],
                    "same, beside a SKIP LOCKED claim+delete",
                    value=rate,
                    unit="/s",
                    baseline="pgbench claim",
                    baseline_value=self.tps("pgbench_claim"),
                    baseline_unit="tps",
                )
            )
            volume_cleanup_timers("thr-")
            self.measure_timer_variant(update)

    def measure_timer_variant(self, update: float | None) -> None:
        """The plain variant beside the host's group commit (same load, same two workers)."""
        from bench import volume

        count = int(min(3000 * self.config.seconds, 200_000))
        volume.timers_insert(
            extension_id="bench_timers", prefix="one-", count=count, first_due_ms=now_ms() - 60_000
        )
        vacuum_analyze()
        start, seconds = self.start_at(), str(self.config.seconds)
        results, span = self.two_workers(
            [
                self.drive("timers-single", "--start-at", start, "--seconds", seconds,
                           "--shard", str(shard), "--shards", "2")
                for shard in range(2)
            ]
        )  # fmt: skip
        fired = sum(r["fired"] for r in results)
        check_running("bench_timers")
        self.add(
            Line(
                "B-timer-throughput",
                "variant: one transaction per timer (prototype)",
                value=fired / span,
                unit="/s",
                baseline="pgbench UPDATE",
                baseline_value=update,
                baseline_unit="tps",
                details={"fired": fired, "seconds": span},
            )
        )
        volume_cleanup_timers("one-")

    def phase_settled_throughput(self) -> None:
        rows = [
            ("B-settled", "runs/s to 10 consumers, unbatched"),
            ("B-settled", "runs/s to 10 consumers, batched (64)"),
        ]
        with self.phase("settled delivery throughput (2 worker processes)", rows):
            missing = missing_settled()
            if missing:
                for row in rows:
                    self.add(unavailable(*row, missing))
                return
            from bench import volume

            update = self.adjacent_tps("pgbench_update", "B-settled")
            for (row, metric), batch, goal, per_s in (
                (rows[0], 1, 0.5, 600),
                (rows[1], 64, 1.0, 6000),
            ):
                count = int(min(max(per_s * self.config.seconds, 500), 300_000))
                span_runs = volume.settled_runs_insert(
                    conversation_prefix="benchvol", conversations=100, count=count
                )
                start_position = span_runs.first - 1
                volume.settled_cursors_set(extension_ids=CONSUMER_IDS, position=start_position)
                vacuum_analyze()
                start, seconds = self.start_at(), str(self.config.seconds)
                label = "unbatched" if batch == 1 else "batched"
                commands = [
                    self.drive(
                        "settled", "--start-at", start, "--seconds", seconds,
                        "--batch", str(batch), "--consumers", ",".join(half),
                        profile=f"settled-{label}-worker" if index == 0 else None,
                    )
                    for index, half in enumerate((CONSUMER_IDS[:5], CONSUMER_IDS[5:]))
                ]  # fmt: skip
                results, span = self.two_workers(commands)
                for consumer in CONSUMER_IDS:
                    check_running(consumer)
                positions = volume.settled_positions(extension_ids=CONSUMER_IDS)
                delivered = sum(positions[c] - start_position for c in CONSUMER_IDS)
                self.add(
                    Line(
                        row,
                        metric,
                        value=delivered / len(CONSUMER_IDS) / span,
                        unit="runs/s",
                        baseline="pgbench UPDATE / 10",
                        baseline_value=None if update is None else update / 10,
                        baseline_unit="tps",
                        kind="ratio",
                        goal=goal,
                        details={
                            "deliveries": sum(r["deliveries"] for r in results),
                            "runs_delivered_per_consumer": delivered / len(CONSUMER_IDS),
                            "seconds": span,
                            "caught_up": all(r["caught_up"] for r in results),
                        },
                    )
                )
                volume.settled_cursors_set(extension_ids=CONSUMER_IDS, position=span_runs.last)

    def phase_artifact_emit(self) -> None:
        row = ("B-artifact-emit", "emits/s into one world, 2 workers")
        with self.phase("artifact emits (2 worker processes, one world)", [row]):
            missing = missing_artifacts()
            if missing:
                self.add(unavailable(*row, missing))
                return
            from bench.artifacts import emit_statements_variables, emit_world_prepare

            data = emit_world_prepare(world_id="benchworld")
            context_file = self.work / "emit-context.json"
            context_file.write_text(json.dumps(data))
            insert = self.adjacent_tps("pgbench_insert", row[0])
            locked = self.adjacent_tps("pgbench_insert_locked", row[0])
            start, seconds = self.start_at(), str(self.config.seconds)
            results, span = self.two_workers(
                [
                    self.drive("emit", "--start-at", start, "--seconds", seconds,
                               "--context", str(context_file), "--prefix", f"w{index}-",
                               profile="emit-worker" if index == 0 else None)
                    for index in range(2)
                ]
            )  # fmt: skip
            emitted = sum(r["emitted"] for r in results)
            rejected = sum(r["rejected"] for r in results)
            self.add(
                Line(
                    *row,
                    value=emitted / span,
                    unit="/s",
                    baseline="pgbench INSERT",
                    baseline_value=insert,
                    baseline_unit="tps",
                    kind="ratio",
                    goal=0.5,
                    details={"emitted": emitted, "rejected": rejected, "seconds": span},
                )
            )
            self.add(
                Line(
                    row[0],
                    "same, beside the INSERT under a row lock held through its commit",
                    value=emitted / span,
                    unit="/s",
                    baseline="pgbench locked INSERT",
                    baseline_value=locked,
                    baseline_unit="tps",
                )
            )
            if pg.pgbench_path() is not None:
                self.emit_statements_line(row[0], emitted / span, emit_statements_variables(data))

    def emit_statements_line(self, row: str, emits: float, variables: dict[str, str]) -> None:
        """Context, right after the emits: the same statements with no Python (pgbench, 2
        clients, into the same world), so the report shows what the SQL alone reaches."""
        own = pg.pgbench_run(
            self.target,
            script=EMIT_STATEMENTS_SCRIPT,
            clients=2,
            seconds=self.config.seconds,
            variables=variables,
        )
        self.state.baselines.setdefault("adjacent", {})[f"emit statements after {row}"] = own
        self.say(f"  the emit's statements (pgbench, no Python): {own['tps']:,.0f} tps")
        self.add(
            Line(
                row,
                "same, beside its own statements run by pgbench (no Python)",
                value=emits,
                unit="/s",
                baseline="pgbench emit statements",
                baseline_value=float(own["tps"]),
                baseline_unit="tps",
            )
        )

    # --- 3/5. B-scale in this process ----------------------------------------------------

    def phase_scale(self, stored: int) -> None:
        with self.phase(f"B-scale at {stored:,} stored timers and runs", []):
            pages = 10 if self.config.quick else 40
            if missing_timers() is None:
                self.state.scale.setdefault("timers", {})[stored] = measure_timer_sweep(pages)
                self.say(f"  timers @ {stored:,}: {self.state.scale['timers'][stored]}")
            if missing_settled() is None:
                runs = 128 if self.config.quick else 640
                self.state.scale.setdefault("settled", {})[stored] = measure_settled_delivery(runs)
                self.say(f"  settled @ {stored:,}: {self.state.scale['settled'][stored]}")

    def summarise_scale(self) -> None:
        base, top = self.config.scale_base, self.config.scale_max
        specs = [
            ("timers", "per_timer_ms", f"timer sweep ms per fired timer @ {top:,} vs {base:,}",
             missing_timers),
            ("timers", "empty_sweep_ms", f"timer sweep with none due @ {top:,} vs {base:,}",
             missing_timers),
            ("settled", "per_delivery_ms",
             f"settled delivery ms per run·consumer @ {top:,} vs {base:,}", missing_settled),
        ]  # fmt: skip
        for kind, key, metric, missing in specs:
            why = missing()
            figures = self.state.scale.get(kind, {})
            if why:
                self.add(unavailable("B-scale", metric, why))
            elif base not in figures or top not in figures:
                self.add(unavailable("B-scale", metric, "failed: a volume was not measured"))
            else:
                self.add(
                    Line(
                        "B-scale",
                        metric,
                        value=figures[top][key],
                        unit="ms",
                        baseline=f"same @ {base:,}",
                        baseline_value=figures[base][key],
                        baseline_unit="ms",
                        details={"ratio_limit": 1.5, "figures": figures},
                    )
                )
                ratio_line = Line(
                    "B-scale",
                    f"{metric.split(' @')[0]}: cost ratio",
                    value=figures[top][key] / max(figures[base][key], 1e-9),
                    unit="x",
                    kind="at_most",
                    goal=1.5,
                )
                self.add(ratio_line)

    # --- 4. Celery worker + beat ---------------------------------------------------------

    def phase_celery(self, stored: int, *, settle_latency: bool) -> None:
        rows = [("B-timer-lateness", f"p50 @ {stored:,} pending"),
                ("B-timer-lateness", f"p99 @ {stored:,} pending")]  # fmt: skip
        if settle_latency:
            rows.append(("B-settled", "settle→consumer commit p99 at 200 runs/s"))
        with self.phase(f"Celery worker (prefork 2) + beat, {stored:,} stored", rows):
            # the same steady state at both volumes (the top one is measured right after the
            # growth's vacuum): the throughput rows' churn vacuumed and checkpointed first, so
            # autovacuum and dirty-page writes do not fall into one volume's latency and not the
            # other's
            vacuum_analyze()
            self.celery_up()
            if settle_latency:
                self.measure_noop()
            self.measure_lateness(stored, rows[0], rows[1])
            if settle_latency:
                self.measure_settle_latency(rows[2])
            if stored == self.config.scale_max:
                self.summarise_lateness()

    def celery_up(self) -> None:
        from bench import tasks
        from bench.extensions import probe

        self.procs.celery_worker(concurrency=2)
        self.procs.celery_beat(schedule=self.work / "celerybeat-schedule")
        probe.drain("bench:noop")

        def ready() -> bool:
            self.procs.check_alive()
            tasks.noop.delay("ready", time.time() * 1000)
            return wait_until(lambda: probe.client().llen("bench:noop") > 0, timeout=2.0)

        if not wait_until(ready, timeout=90, interval=0.5):
            raise BenchError(
                f"the Celery worker never ran a task: {self.procs.tail('celery-worker')}"
            )
        time.sleep(1.0)
        probe.drain("bench:noop")

    def measure_noop(self) -> None:
        from bench import tasks
        from bench.extensions import probe

        count = int(SETTLE_RATE * self.config.seconds)
        paced(count, SETTLE_RATE, lambda i: tasks.noop.delay(f"n{i}", time.time() * 1000))
        wait_until(lambda: probe.client().llen("bench:noop") >= count, timeout=30)
        items = probe.drain("bench:noop")
        latencies = [item["ran"] - item["sent"] for item in items]
        figures = summary(latencies)
        self.state.baselines["celery_noop"] = {"rate": SETTLE_RATE, "sent": count, **figures}
        self.add(
            Line(
                "baseline",
                f"Celery no-op task send→run p99 at {SETTLE_RATE:.0f}/s",
                value=figures["p99"],
                unit="ms",
                details={"p50": figures["p50"], "received": len(items), "sent": count},
            )
        )

    def measure_lateness(
        self, stored: int, p50_row: tuple[str, str], p99_row: tuple[str, str]
    ) -> None:
        missing = missing_timers()
        if missing:
            self.add(unavailable(*p50_row, missing))
            self.add(unavailable(*p99_row, missing))
            return
        from bench import volume
        from bench.extensions import probe
        from bench.extensions.timers import LATENESS_CHANNEL, arm
        from extensions_host.runtime import detached_context

        rate = min(max((self.state.timer_rate or 200.0) / 2, 20.0), 3000.0)
        count = int(rate * self.config.seconds)
        tag = f"lat-{stored}-"
        # every timer is armed before the first one falls due (arming runs about 1,000 SDK
        # `set`s a second here): the figure is the firing path's lateness at that rate, not the
        # runner's arming competing with it for the two cores
        lead_s = 3.0 + count / 600
        first_due = now_ms() + int(lead_s * 1000)
        ctx = detached_context(extension_id="bench_timers", hook="bench arm")
        if ctx is None:
            raise BenchError("bench_timers is not installed in the runner")
        probe.drain(LATENESS_CHANNEL)
        planned = [(f"{tag}{i}", first_due + int(i * 1000 / rate)) for i in range(count)]
        arming = time.perf_counter()
        for chunk_start in range(0, count, 64):
            chunk = planned[chunk_start : chunk_start + 64]
            ctx.transact(lambda c, chunk=chunk: arm(c, keys_and_due=chunk))
        arming = time.perf_counter() - arming
        self.say(f"  armed {count:,} timers in {arming:.1f} s ({count / arming:,.0f}/s)")
        armed_late = now_ms() - first_due
        if armed_late > 0:
            self.state.notes.append(f"lateness @ {stored}: arming ended {armed_late} ms late")
        wait_until(
            lambda: volume.timers_count(extension_id="bench_timers", key_prefix=tag) == 0,
            timeout=lead_s + self.config.seconds + 60,
            interval=0.25,
        )
        time.sleep(0.5)
        items = [i for i in probe.drain(LATENESS_CHANNEL) if i["key"].startswith(tag)]
        late = [item["committed"] - item["due"] for item in items]
        figures = summary(late)
        self.state.lateness[stored] = {**figures, "rate": rate, "armed": count}
        details = {"rate_per_s": rate, "armed": count, "armed_in_s": round(arming, 2),
                   "fired": len(items), **figures}  # fmt: skip
        self.add(Line(*p50_row, value=figures["p50"], unit="ms", kind="below", goal=20.0,
                      note=f"{rate:.0f} timers/s (half max)", details=details))  # fmt: skip
        self.add(Line(*p99_row, value=figures["p99"], unit="ms", kind="below", goal=250.0,
                      baseline="Celery no-op p99",
                      baseline_value=(self.state.baselines.get("celery_noop") or {}).get("p99"),
                      baseline_unit="ms", details=details))  # fmt: skip
        if len(items) < count:
            self.state.notes.append(f"lateness @ {stored}: {count - len(items)} timers unreported")

    def summarise_lateness(self) -> None:
        base, top = self.config.scale_base, self.config.scale_max
        low, high = self.state.lateness.get(base), self.state.lateness.get(top)
        metric = f"p99 @ {top:,} vs @ {base:,}"
        if not low or not high or low.get("p99") is None or high.get("p99") is None:
            self.add(unavailable("B-timer-lateness", metric, "failed: a volume was not measured"))
            return
        self.add(
            Line(
                "B-timer-lateness",
                metric,
                value=high["p99"] / max(low["p99"], 1e-9),
                unit="x",
                kind="at_most",
                goal=1.5,
                details={"base": low, "top": high},
            )
        )

    def measure_settle_latency(self, row: tuple[str, str]) -> None:
        missing = missing_settled()
        if missing:
            self.add(unavailable(*row, missing))
            return
        from bench import volume
        from bench.extensions import probe
        from bench.extensions.settled import LATENCY_CHANNEL, LATENCY_REASON
        from conversations.services import run_settle
        from extensions_host.background.services.settled import core_cursor

        count = int(SETTLE_RATE * self.config.seconds)
        run_ids = volume.claimed_runs_insert(conversation_prefix="benchlat", count=count)
        volume.settled_cursors_set(extension_ids=CONSUMER_IDS, position=core_cursor())
        probe.drain(LATENCY_CHANNEL)
        settled_at: dict[int, float] = {}
        lock = threading.Lock()

        def settle(index: int) -> None:
            result = run_settle(run_id=run_ids[index], status="unanswered", reason=LATENCY_REASON)
            done = time.time() * 1000
            with lock:
                settled_at[int(result.run.settled_sequence)] = done

        began = time.perf_counter()
        paced(count, SETTLE_RATE, settle, threads=3)
        achieved = count / (time.perf_counter() - began)
        last = max(settled_at)
        wait_until(
            lambda: min(volume.settled_positions(extension_ids=CONSUMER_IDS).values()) >= last,
            timeout=60,
            interval=0.25,
        )
        time.sleep(0.5)
        pairs = []
        for item in probe.drain(LATENCY_CHANNEL):
            for sequence in item["sequences"]:
                if sequence in settled_at:
                    pairs.append(item["committed"] - settled_at[sequence])
        figures = summary(pairs)
        self.add(
            Line(
                *row,
                value=figures["p99"],
                unit="ms",
                kind="below",
                goal=100.0,
                baseline="Celery no-op p99",
                baseline_value=(self.state.baselines.get("celery_noop") or {}).get("p99"),
                baseline_unit="ms",
                note=f"settled at {achieved:.0f} runs/s",
                details={"expected_pairs": count * len(CONSUMER_IDS), "achieved_rate": achieved,
                         **figures},
            )
        )  # fmt: skip

    # --- 6. the API under gunicorn -------------------------------------------------------

    def phase_api(self) -> None:
        rows = [
            ("B-api-record", "command with record put, max req/s"),
            ("B-api-record", "command p99 at half max"),
            ("B-projection", "projection of 20 extensions, p99"),
        ]
        with self.phase("API under gunicorn (2 sync workers), load from a second process", rows):
            from bench.volume import conversations_insert

            conversation = conversations_insert(prefix="benchproj", count=1)[0]
            seed_projection_records(conversation)
            self.procs.gunicorn(port=self.config.port, workers=2)
            base = f"http://127.0.0.1:{self.config.port}"
            from bench.procs import http_ready

            if not http_ready(f"{base}/healthz", timeout=60):
                raise BenchError(f"gunicorn never answered: {self.procs.tail('gunicorn')}")
            auth = ["--header", "Authorization: Bearer bench-service-token"]
            body = ["--body", '{"key": "k{rand}", "value": "bench value"}', "--method", "POST"]
            bare_url = f"{base}/bench/baseline/put"
            command_url = f"{base}/v1/extensions/bench_api/commands/put"
            bare, command = self.alternating(
                (bare_url, *body), (command_url, *body, *auth), rounds=API_ROUNDS
            )
            self.state.baselines["bare_view_max"] = bare
            bare_half = self.loadgen(bare_url, *body, rate=bare["rps"] / 2)
            self.state.baselines["bare_view_half"] = bare_half
            command_half = self.loadgen(command_url, *body, *auth, rate=command["rps"] / 2)
            self.add(
                Line(
                    *rows[0],
                    value=command["rps"],
                    unit="req/s",
                    baseline="bare Django view",
                    baseline_value=bare["rps"],
                    baseline_unit="req/s",
                    kind="ratio",
                    goal=0.6,
                    details={"command": command, "bare": bare},
                )
            )
            self.add(
                Line(
                    *rows[1],
                    value=command_half["latency_ms"]["p99"],
                    unit="ms",
                    kind="below",
                    goal=50.0,
                    baseline="bare view p99 at its half max",
                    baseline_value=bare_half["latency_ms"]["p99"],
                    baseline_unit="ms",
                    note=f"{command_half['rate']:.0f} req/s",
                    details={"command_half": command_half, "bare_half": bare_half},
                )
            )
            projection = self.loadgen(
                f"{base}/v1/conversations/{conversation}/projection", *auth, concurrency=1
            )
            slots = count_projection_slots(f"{base}/v1/conversations/{conversation}/projection")
            self.add(
                Line(
                    *rows[2],
                    value=projection["latency_ms"]["p99"],
                    unit="ms",
                    kind="below",
                    goal=30.0,
                    note=f"{slots} slots, 1 client",
                    details={"projection": projection, "slots": slots},
                )
            )
            if slots != 20:
                self.state.notes.append(f"the projection had {slots} slots, not 20")

    def alternating(
        self, baseline: tuple[str, ...], measured: tuple[str, ...], *, rounds: int
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Closed-loop maxima of a baseline and a measured endpoint, in alternating rounds of
        BENCH_SECONDS / rounds each: the machine's drift during the row falls on both alike.
        Each result is the first round's, with `rps` over all rounds and each round's kept."""
        seconds = max(self.config.seconds / rounds, 2.0)
        runs: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        for _ in range(rounds):
            for args, into in ((baseline, runs[0]), (measured, runs[1])):
                into.append(self.loadgen(*args, seconds=seconds))
        baseline_result, measured_result = (
            {
                **done[0],
                "ok": sum(r["ok"] for r in done),
                "errors": sum(r["errors"] for r in done),
                "seconds": sum(r["seconds"] for r in done),
                "rps": sum(r["ok"] for r in done) / sum(r["seconds"] for r in done),
                "rounds": [{"rps": r["rps"], "latency_ms": r["latency_ms"]} for r in done],
            }
            for done in runs
        )
        return baseline_result, measured_result

    def loadgen(
        self,
        url: str,
        *extra: str,
        rate: float = 0.0,
        concurrency: int = LOADGEN_CONCURRENCY,
        seconds: float | None = None,
    ) -> dict[str, Any]:
        args = [
            PYTHON, "-m", "bench.loadgen", "--url", url, *extra,
            "--seconds", str(seconds or self.config.seconds), "--warmup", "1",
            "--concurrency", str(concurrency * 2 if rate else concurrency),
        ]  # fmt: skip
        if rate:
            args += ["--rate", f"{rate:.1f}"]
        result = run_json(args, env=self.env, timeout=self.config.seconds + 60)
        self.procs.check_alive()
        if result["ok"] == 0:
            raise BenchError(f"no successful request to {url}: {result['statuses']}")
        if result["errors"]:
            self.state.notes.append(
                f"{url}: {result['errors']} failed requests {result['statuses']}"
            )
        return result

    def phase_profile_api(self) -> None:
        with self.phase("profiles of the API hot paths (in-process, pyinstrument)", []):
            profile_api(self.profiles)

    # --- report --------------------------------------------------------------------------

    def finish(self) -> int:
        finished = dt.datetime.now(dt.UTC)
        self.machine["loadavg_at_end"] = list(os.getloadavg())
        busiest = max(self.machine.get("loadavg_at_start", [0])[0], os.getloadavg()[1])
        if busiest > (os.cpu_count() or 1):
            self.state.notes.append(
                f"the machine was busy (load average {busiest:.1f} on {os.cpu_count()} cores): "
                "other processes competed with the bench; figures are pessimistic"
            )
        data = report_data(
            lines=self.state.lines,
            baselines=self.state.baselines,
            machine=self.machine,
            config={**asdict(self.config), "database_url": self.target.dbname},
            started=self.started,
            finished=finished,
            notes=self.state.notes,
        )
        path = write_report(data, results_path(finished))
        print()
        print(render_table(self.state.lines))
        print()
        for note in self.state.notes:
            print(f"note: {note}")
        print(f"goals met: {data['goals_met']}, missed: {data['goals_missed']}, "
              f"unavailable: {len(data['unavailable'])}; {data['duration_s']} s")  # fmt: skip
        print(f"report: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        if self.config.profile:
            print(f"profiles: {self.profiles}")
        return 1 if self.state.failed else 0


class FeatureMissing(BenchError):
    pass


# --- feature checks (the tree is built by several people at once) --------------------------


def missing_timers() -> str | None:
    from django.apps import apps

    if not apps.is_installed("extensions_host.background"):
        return "the background app (extensions_host.background) is not installed"
    try:
        from extensions_host.background.services.timers import timers_fire_page  # noqa: F401
    except ImportError as exc:
        return f"the timer sweep (timers_fire_page): {exc}"
    return None


def missing_settled() -> str | None:
    from django.apps import apps

    if not apps.is_installed("extensions_host.background"):
        return "the background app (extensions_host.background) is not installed"
    try:
        from conversations.services import run_settle  # noqa: F401
        from extensions_host.background.services.settled import settled_deliver  # noqa: F401
    except ImportError as exc:
        return f"settled delivery (settled_deliver / run_settle): {exc}"
    return None


def missing_artifacts() -> str | None:
    try:
        from artifacts.services import (  # noqa: F401
            artifact_emit,
            operation_begin,
            request_attempt_begin,
        )
    except ImportError as exc:
        return f"the artifact store (artifact_emit): {exc}"
    return None


# --- helpers used in this process ----------------------------------------------------------


def now_ms() -> int:
    from core import clock

    return clock.now_ms()


def vacuum_analyze() -> None:
    """A steady state: bulk-inserted tables vacuumed and analysed, so autovacuum does not
    start in the middle of a measurement and the planner knows the volume; then a checkpoint,
    so the dirty pages of the bulk insert are not written out during the next measurement."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
        cursor.execute("CHECKPOINT")


def check_running(extension_id: str) -> None:
    from extensions_host.models import RosterEntry

    row = RosterEntry.objects.get(pk=extension_id)
    if row.status != "running":
        raise BenchError(f"{extension_id} was stopped: {row.reason}")


def volume_cleanup_timers(prefix: str) -> None:
    from extensions_host.background.models import Timer

    Timer.objects.filter(extension_id="bench_timers", key__startswith=prefix).delete()


def paced(count: int, rate: float, fn: Callable[[int], Any], *, threads: int = 1) -> None:
    """Call fn(0..count-1) at `rate` per second (scheduled instants, shared by `threads`)."""
    start = time.perf_counter()
    lock = threading.Lock()
    cursor = [0]
    errors: list[BaseException] = []

    def loop() -> None:
        from django.db import connection

        try:
            while True:
                with lock:
                    index = cursor[0]
                    cursor[0] += 1
                if index >= count or errors:
                    return
                delay = start + index / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                fn(index)
        except BaseException as exc:
            errors.append(exc)
        finally:
            if threading.current_thread() is not threading.main_thread():
                connection.close()

    workers = [threading.Thread(target=loop) for _ in range(max(threads, 1))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]


def measure_timer_sweep(pages: int) -> dict[str, float]:
    """One process: the cost of a sweep with none due, and per fired timer."""
    from bench import volume
    from extensions_host.background.services.timers import PAGE, timers_fire_page

    calls = 200
    began = time.perf_counter()
    for _ in range(calls):
        timers_fire_page()
    empty_ms = (time.perf_counter() - began) * 1000 / calls
    count = PAGE * pages
    volume.timers_insert(
        extension_id="bench_timers", prefix="scl-", count=count, first_due_ms=now_ms() - 1000
    )
    fired = 0
    began = time.perf_counter()
    while True:
        result = timers_fire_page()
        fired += result.fired
        if result.claimed == 0:
            break
    elapsed = time.perf_counter() - began
    check_running("bench_timers")
    volume_cleanup_timers("scl-")
    return {"empty_sweep_ms": empty_ms, "per_timer_ms": elapsed * 1000 / max(fired, 1),
            "fired": fired}  # fmt: skip


def measure_settled_delivery(runs: int) -> dict[str, float]:
    """One process: deliver `runs` new runs to the 10 consumers in batches of 64."""
    from bench import volume
    from extensions_host.background.services.settled import PAGE_FRAMES, settled_deliver

    span = volume.settled_runs_insert(conversation_prefix="benchvol", conversations=100, count=runs)
    volume.settled_cursors_set(extension_ids=CONSUMER_IDS, position=span.first - 1)
    deliveries = 0
    began = time.perf_counter()
    for consumer in CONSUMER_IDS:
        while settled_deliver(extension_id=consumer, batch=64, frames=PAGE_FRAMES):
            deliveries += 1
        deliveries += 1
    elapsed = time.perf_counter() - began
    positions = volume.settled_positions(extension_ids=CONSUMER_IDS)
    delivered = sum(positions[c] - (span.first - 1) for c in CONSUMER_IDS)
    return {"per_delivery_ms": elapsed * 1000 / max(delivered, 1), "delivered": delivered,
            "frames": deliveries}  # fmt: skip


def seed_projection_records(conversation_id: str) -> None:
    """One record per projecting extension for that conversation (its `project` reads it)."""
    from bench.extensions.api import Item
    from extensions_host.models import ExtensionRecord

    value = Item(key=conversation_id, value="projected").model_dump_json()
    ids = ["bench_api", *(f"bench_p{i:02d}" for i in range(1, 20))]
    ExtensionRecord.objects.bulk_create(
        [
            ExtensionRecord(
                extension_id=ext, collection="item", key=conversation_id, value=value,
                size_bytes=len(value),
            )
            for ext in ids
        ],
        ignore_conflicts=True,
    )  # fmt: skip


def count_projection_slots(url: str) -> int:
    import httpx

    response = httpx.get(url, headers={"Authorization": "Bearer bench-service-token"}, timeout=10)
    response.raise_for_status()
    slots = response.json().get("slots", {})
    stopped = [k for k, v in slots.items() if v.get("status") != "running"]
    if stopped:
        raise BenchError(f"projection slots stopped: {stopped}")
    return len(slots)


def api_requests(client: Any, conversation_id: str) -> dict[str, Callable[[int], Any]]:
    """The in-process API requests of the profiles (Django's test client): the bare view, the
    command and the projection; the argument varies the record key."""
    auth = {"HTTP_AUTHORIZATION": "Bearer bench-service-token"}
    return {
        "api-bare-view": lambda i: client.post(
            "/bench/baseline/put", {"key": f"p{i}", "value": "v"}, content_type="application/json"
        ),
        "api-command": lambda i: client.post(
            "/v1/extensions/bench_api/commands/put",
            {"key": f"p{i}", "value": "v"},
            content_type="application/json",
            **auth,
        ),
        "projection": lambda i: client.get(
            f"/v1/conversations/{conversation_id}/projection", **auth
        ),
    }


def profile_api(directory: Path) -> None:
    """pyinstrument over in-process requests (Django's test client: the whole Django stack,
    no network) of the bare view, the command and the projection."""
    from django.test import Client
    from pyinstrument import Profiler

    directory.mkdir(parents=True, exist_ok=True)
    for name, call in api_requests(Client(), "benchproj0").items():
        for i in range(20):
            call(i)  # warm caches and connections
        profiler = Profiler(interval=0.0002)
        began = time.perf_counter()
        calls = 0
        profiler.start()
        while calls < PROFILE_CALLS and time.perf_counter() - began < PROFILE_SECONDS:
            response = call(calls)
            calls += 1
            if response.status_code >= 400:
                raise BenchError(f"{name}: {response.status_code} {response.content[:200]!r}")
        profiler.stop()
        per_call = (time.perf_counter() - began) * 1000 / calls
        text = profiler.output_text(unicode=True, color=False)
        header = f"{calls} calls, {per_call:.2f} ms per call (profiled)"
        (directory / f"{name}.txt").write_text(f"{header}\n{text}")


def machine_info(target: pg.Target) -> dict[str, Any]:
    def command(*args: str) -> str:
        try:
            return subprocess.run(args, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return ""

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "loadavg_at_start": list(os.getloadavg()),
        "cpu": cpu,
        "free_h": command("free", "-h"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    try:
        info["postgresql"] = pg.server_version(target)
        info["postgresql_settings"] = pg.server_settings(target)
    except Exception as exc:
        info["postgresql"] = f"unknown ({exc})"
    info["redis"] = command("redis-cli", "-v")
    return info


def main() -> int:
    config = Config.from_env(dict(os.environ))
    return Bench(config).run()


if __name__ == "__main__":
    raise SystemExit(main())
