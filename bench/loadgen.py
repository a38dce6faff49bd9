"""The HTTP load generator: a second process on the same machine, loopback only, bounded in
count and time, printing one JSON summary on stdout.

    python -m bench.loadgen --url http://127.0.0.1:8765/bench/baseline/put --method POST \
        --body '{"key": "k{rand}", "value": "v"}' --concurrency 4 --seconds 10 [--rate 300]

Closed loop (no `--rate`): `concurrency` threads send back to back; the figure is requests/s.
Open loop (`--rate R`): requests are scheduled every 1/R s and each latency counts from its
scheduled instant, so a server that falls behind shows it (no coordinated omission).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from typing import Any
from urllib.parse import urlparse

import httpx

from bench.report import summary

MAX_SECONDS = 600
MAX_REQUESTS = 2_000_000
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def _check_loopback(url: str) -> None:
    host = urlparse(url).hostname or ""
    if host not in LOOPBACK and not host.startswith("127."):
        raise SystemExit(f"refusing to load {host!r}: loopback addresses only")


class Load:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.statuses: dict[str, int] = {}
        self.errors = 0
        self.sent = 0
        self.next_index = 0
        self.headers = dict(h.split(":", 1) for h in args.header)
        self.headers = {k.strip(): v.strip() for k, v in self.headers.items()}
        if args.body is not None:
            self.headers.setdefault("Content-Type", "application/json")

    def body(self) -> bytes | None:
        if self.args.body is None:
            return None
        text = self.args.body.replace("{rand}", str(random.randint(1, self.args.keyspace)))
        return text.encode()

    def record(self, status: str, latency_ms: float | None) -> None:
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if latency_ms is None:
                self.errors += 1
            else:
                self.latencies.append(latency_ms)

    def send(self, client: httpx.Client, scheduled: float, measuring: bool) -> None:
        try:
            response = client.request(
                self.args.method, self.args.url, content=self.body(), headers=self.headers
            )
            latency = (time.perf_counter() - scheduled) * 1000
            ok = 200 <= response.status_code < 300
            if measuring:
                self.record(str(response.status_code), latency if ok else None)
        except httpx.HTTPError as exc:
            if measuring:
                self.record(type(exc).__name__, None)

    def take(self, start: float, rate: float) -> tuple[int, float] | None:
        with self.lock:
            if self.next_index >= self.args.max_requests:
                return None
            index = self.next_index
            self.next_index += 1
        return index, start + index / rate

    def worker(self, start: float, warm_until: float, end: float) -> None:
        with httpx.Client(timeout=self.args.timeout, http2=False) as client:
            rate = self.args.rate
            while True:
                if rate:
                    taken = self.take(start, rate)
                    if taken is None:
                        return
                    _, scheduled = taken
                    if scheduled >= end:
                        return
                    delay = scheduled - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                else:
                    scheduled = time.perf_counter()
                    if scheduled >= end:
                        return
                    with self.lock:
                        if self.sent >= self.args.max_requests:
                            return
                        self.sent += 1
                self.send(client, scheduled, measuring=scheduled >= warm_until)

    def run(self) -> dict[str, Any]:
        start = time.perf_counter()
        warm_until = start + self.args.warmup
        end = warm_until + self.args.seconds
        threads = [
            threading.Thread(target=self.worker, args=(start, warm_until, end), daemon=True)
            for _ in range(self.args.concurrency)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=self.args.seconds + self.args.warmup + self.args.timeout + 5)
        elapsed = max(time.perf_counter() - warm_until, 1e-9)
        ok = len(self.latencies)
        return {
            "url": self.args.url,
            "mode": "open" if self.args.rate else "closed",
            "rate": self.args.rate,
            "concurrency": self.args.concurrency,
            "seconds": round(elapsed, 3),
            "ok": ok,
            "errors": self.errors,
            "statuses": self.statuses,
            "rps": ok / elapsed,
            "latency_ms": summary(self.latencies),
        }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--method", default="GET")
    parser.add_argument("--body", default=None, help="JSON text; {rand} → 1..keyspace")
    parser.add_argument("--header", action="append", default=[], help="Name: value")
    parser.add_argument("--keyspace", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rate", type=float, default=0.0, help="requests/s (open loop)")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--max-requests", type=int, default=MAX_REQUESTS)
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= MAX_SECONDS or not 0 <= args.warmup <= 60:
        parser.error(f"--seconds must be in (0, {MAX_SECONDS}] and --warmup in [0, 60]")
    if not 1 <= args.concurrency <= 256:
        parser.error("--concurrency must be 1..256")
    args.max_requests = min(args.max_requests, MAX_REQUESTS)
    _check_loopback(args.url)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    print(json.dumps(Load(args).run()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
