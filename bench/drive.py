"""Worker-side drivers: one process of a throughput benchmark, calling the same service a Celery
task body calls, in a loop, for a bounded time. Prints one JSON summary on stdout.

    python -m bench.drive timers  --start-at T --seconds S [--profile FILE]
    python -m bench.drive timers-single --start-at T --seconds S --shard 0 --shards 2
    python -m bench.drive settled --start-at T --seconds S --batch 64 --consumers bench_c00,…
    python -m bench.drive emit    --start-at T --seconds S --world W --context FILE --prefix P

The runner starts two of them at once (the "2 workers" of spec 08) with a common start instant,
so Django's start-up is not measured. Without the optional feature installed a driver prints
`{"unavailable": "<what is missing>"}`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()


def _wait(start_at: float) -> None:
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)


class _Profiled(AbstractContextManager["_Profiled"]):
    """pyinstrument around the measured loop when `--profile FILE` is given."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.profiler: Any = None

    def __enter__(self) -> _Profiled:
        if self.path:
            from pyinstrument import Profiler

            self.profiler = Profiler(interval=0.0005)
            self.profiler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.profiler is not None:
            self.profiler.stop()
            Path(self.path).write_text(  # type: ignore[arg-type]
                self.profiler.output_text(unicode=True, color=False, show_all=False)
            )


def drive_timers(args: argparse.Namespace) -> dict[str, Any]:
    from extensions_host.background.services.timers import timers_fire_page

    fired = pages = stopped = 0
    _wait(args.start_at)
    started = time.time()
    ends = started + args.seconds
    with _Profiled(args.profile):
        while time.time() < ends:
            result = timers_fire_page()
            pages += 1
            fired += result.fired
            stopped += result.stopped
            if result.claimed == 0:
                break  # nothing due is left unclaimed
    return {"fired": fired, "pages": pages, "stopped": stopped, "started": started,
            "ended": time.time()}  # fmt: skip


def drive_timers_single(args: argparse.Namespace) -> dict[str, Any]:
    from bench.variants import fire_one_per_transaction

    fired = pages = 0
    _wait(args.start_at)
    started = time.time()
    ends = started + args.seconds
    with _Profiled(args.profile):
        while time.time() < ends:
            claimed, done = fire_one_per_transaction(shard=args.shard, shards=args.shards)
            pages += 1
            fired += done
            if claimed == 0:
                break
    return {"fired": fired, "pages": pages, "stopped": 0, "started": started,
            "ended": time.time()}  # fmt: skip


def drive_settled(args: argparse.Namespace) -> dict[str, Any]:
    from extensions_host.background.services.settled import PAGE_FRAMES, settled_deliver

    consumers = [c for c in args.consumers.split(",") if c]
    deliveries = 0
    waiting = set(consumers)
    _wait(args.start_at)
    started = time.time()
    ends = started + args.seconds
    with _Profiled(args.profile):
        while waiting and time.time() < ends:
            for consumer in sorted(waiting):
                # as the task body does: a page of frames, each handing `batch` runs to the hook
                more = settled_deliver(extension_id=consumer, batch=args.batch, frames=PAGE_FRAMES)
                deliveries += 1
                if not more:
                    waiting.discard(consumer)
    return {"deliveries": deliveries, "started": started, "ended": time.time(),
            "caught_up": not waiting}  # fmt: skip


def drive_emit(args: argparse.Namespace) -> dict[str, Any]:
    from artifacts.services import artifact_emit
    from bench.artifacts import request_context_from

    context = request_context_from(json.loads(Path(args.context).read_text()))
    emitted = rejected = 0
    _wait(args.start_at)
    started = time.time()
    ends = started + args.seconds
    n = 0
    with _Profiled(args.profile):
        while time.time() < ends:
            n += 1
            result = artifact_emit(
                context=context,
                output="panel",
                payload=f"bench artifact {args.prefix}{n}",
                tool_call_id=f"{args.prefix}{n}",
            )
            if result.ok:
                emitted += 1
            else:
                rejected += 1
    return {"emitted": emitted, "rejected": rejected, "started": started, "ended": time.time()}


DRIVERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "timers": drive_timers,
    "timers-single": drive_timers_single,
    "settled": drive_settled,
    "emit": drive_emit,
}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kind", choices=sorted(DRIVERS))
    parser.add_argument("--start-at", type=float, default=0.0, help="epoch seconds")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--consumers", default="")
    parser.add_argument("--context", default="")
    parser.add_argument("--prefix", default="w")
    parser.add_argument("--shard", type=int, default=0)
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= 600:
        parser.error("--seconds must be in (0, 600]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    _setup()
    try:
        result = DRIVERS[args.kind](args)
    except ImportError as exc:
        result = {"unavailable": f"{args.kind} service cannot be imported ({exc})"}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
