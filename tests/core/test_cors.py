"""CORS (spec 05): off unless `HOST_CORS_ORIGINS` lists origins; then only those origins get
the CORS headers, without credentials."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORIGIN = "https://app.example"

PREFLIGHT = """
import json
import django
django.setup()
from django.test import Client
answers = {}
for origin in ("https://app.example", "https://elsewhere.example"):
    response = Client().options(
        "/v1/conversations",
        HTTP_ORIGIN=origin,
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS="authorization, content-type",
    )
    answers[origin] = {
        "allow_origin": response.headers.get("Access-Control-Allow-Origin"),
        "credentials": response.headers.get("Access-Control-Allow-Credentials"),
    }
print(json.dumps(answers))
"""


def test_without_listed_origins_no_cross_origin_request_is_allowed(client):
    response = client.options(
        "/v1/conversations",
        HTTP_ORIGIN=ORIGIN,
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
    )
    assert "Access-Control-Allow-Origin" not in response.headers
    response = client.get("/healthz", HTTP_ORIGIN=ORIGIN)
    assert "Access-Control-Allow-Origin" not in response.headers


def test_listed_origins_and_only_those_are_allowed_without_credentials():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "HOST_CORS_ORIGINS": f"{ORIGIN},https://other.example",
    }
    done = subprocess.run(
        [sys.executable, "-c", PREFLIGHT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert answers[ORIGIN] == {"allow_origin": ORIGIN, "credentials": None}
    assert answers["https://elsewhere.example"]["allow_origin"] is None
