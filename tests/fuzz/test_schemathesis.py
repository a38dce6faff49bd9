"""Schemathesis against the live `/v1/schema` of a real gunicorn server (spec 08 reliability:
"all checks, stateful on → 0 failures, 0 server errors").

Every check (`--checks all`) in every phase — examples, coverage, fuzzing and the stateful
phase (links inferred from the schema) — once as the service principal and once as an ordinary
user with an API token. The SSE stream (`x-streaming`) and the `/v1/ext/…` catch-all
(`x-fuzz-exclude`) are excluded by their marks. Bounded by `FUZZ_EXAMPLES` (examples per
operation and phase): small in `make test`, ≥ 100 in `make fuzz`. `FUZZ_SEED` fixes the seed
(CI uses a fixed one so a run is reproducible; `make fuzz` draws a new one unless given).
Settings that are not obvious live in `schemathesis.toml` beside this file, each with its reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from conversations.models import Conversation
from core import clock
from core.services import token_create
from tests.conftest import SERVICE_TOKEN
from tests.security.live import ROOT, gunicorn

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

HERE = Path(__file__).resolve().parent
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "3"))
SEED = os.environ.get("FUZZ_SEED", "" if os.environ.get("FUZZ_RANDOM") else "20261130")
# a guard against a hung run only (`--max-time` would make schemathesis repeat until it is spent)
TIMEOUT_S = int(os.environ.get("FUZZ_TIMEOUT_SECONDS", "3600"))
REPORTS = Path(os.environ.get("FUZZ_REPORT_DIR", ROOT / "var" / "fuzz"))


def seed_data() -> dict[str, str]:
    """A few rows per kind, so reads reach real objects: conversations of every sharing for the
    user and for another user (the other's private one must stay invisible), and a token."""
    users = get_user_model().objects
    alice = users.create_user(username="alice", password="x")
    bob = users.create_user(username="bob", password="x")
    for who in (alice, bob):
        for sharing in ("private", "users", "public"):
            Conversation.objects.create(
                id=f"{who.username}-{sharing}",
                owner=who,
                sharing=sharing,
                last_activity_at=clock.now(),
            )
    _, raw = token_create(user=alice, name="fuzz", scope="write", expires_at=None)
    return {"service": SERVICE_TOKEN, "user": raw}


def run_schemathesis(base_url: str, token: str, report: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(HERE / "schemathesis.toml"),
        "run",
        f"{base_url}/v1/schema",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        str(EXAMPLES),
        "--header",
        f"Authorization: Bearer {token}",
        "--exclude-by",
        "/x-fuzz-exclude == true",
        "--exclude-path-regex",
        "/events$",
        "--report",
        "json",
        "--report-json-path",
        str(report),
        "--no-color",
    ]
    if SEED:
        command += ["--seed", SEED]
    return subprocess.run(
        command,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST")},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


@pytest.mark.parametrize("principal", ["service", "user"])
def test_schemathesis_finds_no_failure_and_no_server_error(tmp_path, principal):
    tokens = seed_data()
    REPORTS.mkdir(parents=True, exist_ok=True)
    report_path = REPORTS / f"schemathesis-{principal}.json"
    # gunicorn refuses a request line over 4094 bytes itself, with an HTML 400, before the app
    # sees it; lifted here so generated long parameters reach the API (which must cope)
    with gunicorn(
        tmp_path,
        args=("--limit-request-line", "0"),
        HOST_EXTENSIONS="tests.fuzz.fuzz_ext:fuzzy",
    ) as server:
        done = run_schemathesis(server.url, tokens[principal], report_path)
        server_log = server.output()
    assert report_path.exists(), done.stdout[-5000:] + done.stderr[-5000:]
    report = json.loads(report_path.read_text())
    summary = {
        "principal": principal,
        "examples": EXAMPLES,
        "seed": report["seed"],
        "seconds": round(report["running_time"], 1),
        "operations": report["operations"]["tested"],
        "test_cases": report["test_cases"]["generated"],
        "failures": sum(f["count"] for f in report["failures"]),
        "errors": len(report["errors"]),
    }
    print(json.dumps(summary))  # the figures docs/reliability.md reports (pytest -s)
    (REPORTS / f"summary-{principal}.json").write_text(json.dumps(summary))
    assert report["failures"] == [] and report["errors"] == [], done.stdout[-20000:]
    assert report["complete"] and report["stop_reason"] == "completed", report["stop_reason"]
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    phases = report["phases"]
    assert {name: phases[name]["status"] for name in ("coverage", "fuzzing", "stateful")} == {
        "coverage": "success",
        "fuzzing": "success",
        "stateful": "success",
    }
    # the run reached every selected operation; the excluded ones are exactly the marked six
    assert report["operations"]["tested"] == report["operations"]["selected"] >= 40
    assert report["operations"]["total"] - report["operations"]["selected"] >= 6
    assert "Traceback" not in server_log, server_log[-5000:]
