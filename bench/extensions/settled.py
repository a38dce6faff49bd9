"""Settled-delivery benchmarks' extensions: ten consumers `bench_c00` … `bench_c09`.

Each delivery writes one record (the consumer's position). Runs settled by the latency row carry
the reason `bench-latency`; a batch holding one reports its commit time per run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from bench.extensions import CONSUMERS, probe
from extensions_host.sdk import Collection, Extension

LATENCY_REASON = "bench-latency"
LATENCY_CHANNEL = "bench:settled"


class Seen(BaseModel):
    key: str = "position"
    sequence: int
    runs: int


def consumer_id(index: int) -> str:
    return f"bench_c{index:02d}"


def _make(index: int) -> Extension:
    ext = Extension(
        id=consumer_id(index),
        version="1.0.0",
        grants={"state", "settled"},
        collections={"seen": Collection(Seen, key=lambda s: s.key)},
        description="Benchmark: a settled consumer writing one record per delivery.",
    )

    @ext.on_settled
    def on_settled(ctx: Any, runs: list[Any]) -> None:
        ctx.collection("seen").put(Seen(sequence=runs[-1].sequence, runs=len(runs)))
        timed = [
            run.sequence for run in runs if (run.outcome or {}).get("reason") == LATENCY_REASON
        ]
        if timed:
            probe.push_on_commit(LATENCY_CHANNEL, {"consumer": ext.id, "sequences": timed})

    return ext


c00, c01, c02, c03, c04, c05, c06, c07, c08, c09 = (_make(i) for i in range(CONSUMERS))
