"""The bench database (created and dropped by the runner) and the pgbench baselines."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import psycopg
from psycopg import sql

SCRIPTS = Path(__file__).resolve().parent / "pgbench"
TPS_RE = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")
LATENCY_RE = re.compile(r"latency average = ([0-9.]+) ms")


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    user: str
    password: str
    dbname: str

    @classmethod
    def from_url(cls, url: str) -> Target:
        parsed = urlparse(url)
        if parsed.scheme not in {"postgres", "postgresql", "pgsql"}:
            raise ValueError("BENCH_DATABASE_URL must be a postgres:// URL")
        dbname = parsed.path.lstrip("/")
        if not re.fullmatch(r"[A-Za-z0-9_]{1,63}", dbname):
            raise ValueError("the bench database name must be 1..63 of [A-Za-z0-9_]")
        return cls(
            host=parsed.hostname or "127.0.0.1",
            port=parsed.port or 5432,
            user=unquote(parsed.username or "postgres"),
            password=unquote(parsed.password or ""),
            dbname=dbname,
        )

    def connect(self, dbname: str | None = None) -> psycopg.Connection:
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password or None,
            dbname=dbname or self.dbname,
            autocommit=True,
        )

    def env(self) -> dict[str, str]:
        """libpq variables for pgbench/psql."""
        env = {
            "PGHOST": self.host,
            "PGPORT": str(self.port),
            "PGUSER": self.user,
            "PGDATABASE": self.dbname,
        }
        if self.password:
            env["PGPASSWORD"] = self.password
        return env


def database_recreate(target: Target) -> None:
    with target.connect("postgres") as conn:
        name = sql.Identifier(target.dbname)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))


def database_drop(target: Target) -> None:
    with target.connect("postgres") as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(target.dbname))
        )


def server_version(target: Target) -> str:
    with target.connect() as conn:
        row = conn.execute("SELECT version()").fetchone()
        return str(row[0]) if row else ""


def server_settings(target: Target) -> dict[str, str]:
    names = ["fsync", "synchronous_commit", "shared_buffers", "max_connections", "wal_level"]
    with target.connect() as conn:
        return {
            name: str(conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0])
            for name in names
        }


def pgbench_path() -> str | None:
    found = shutil.which("pgbench")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"))
    return candidates[-1] if candidates else None


def pgbench_prepare(target: Target, *, queue_rows: int) -> None:
    """pgbench's own tables (scale 1: 100k accounts) and the claim queue."""
    binary = pgbench_path()
    if binary is None:
        raise FileNotFoundError("pgbench is not installed")
    subprocess.run(
        [binary, "-i", "-s", "1", "-q"],
        env={**os.environ, **target.env()},
        check=True,
        capture_output=True,
    )
    with target.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS bench_queue")
        conn.execute("CREATE TABLE bench_queue (id bigserial PRIMARY KEY, due bigint NOT NULL)")
        conn.execute(
            "INSERT INTO bench_queue (due) SELECT g FROM generate_series(1, %s) AS g",
            [queue_rows],
        )
        conn.execute("CREATE INDEX bench_queue_due_idx ON bench_queue (due, id)")
        conn.execute("VACUUM ANALYZE bench_queue")
        conn.execute("VACUUM ANALYZE pgbench_accounts")


def pgbench_run(
    target: Target,
    *,
    script: str,
    clients: int,
    seconds: float,
    variables: dict[str, str] | None = None,
) -> dict[str, float]:
    """Run one custom script (`variables` are its `-D name=value`); {tps, latency_ms}."""
    binary = pgbench_path()
    if binary is None:
        raise FileNotFoundError("pgbench is not installed")
    defines = [f"-D{name}={value}" for name, value in (variables or {}).items()]
    done = subprocess.run(
        [
            binary, "-n", "-f", str(SCRIPTS / script), *defines,
            "-c", str(clients), "-j", str(clients), "-T", str(max(1, round(seconds))),
        ],
        env={**os.environ, **target.env()},
        check=True,
        capture_output=True,
        text=True,
    )  # fmt: skip
    tps = TPS_RE.search(done.stdout)
    latency = LATENCY_RE.search(done.stdout)
    if tps is None:
        raise RuntimeError(f"pgbench printed no tps: {done.stdout[-500:]} {done.stderr[-500:]}")
    return {
        "tps": float(tps.group(1)),
        "latency_ms": float(latency.group(1)) if latency else float("nan"),
        "clients": clients,
    }


def queue_remaining(target: Target) -> int:
    with target.connect() as conn:
        row = conn.execute("SELECT count(*) FROM bench_queue").fetchone()
        return int(row[0]) if row else 0
