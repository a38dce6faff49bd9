"""What `make run` does, over real HTTP: bootstrap prints an admin login and a service token,
gunicorn serves the docs, the admin login works and the token authenticates."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import httpx
import pytest

from tests.integration.conftest import ROOT, wait_until

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bootstrap_then_serve_gives_working_docs_admin_login_and_service_token(tmp_path):
    var = tmp_path / "var"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HOST_VAR_DIR": str(var),
        "DJANGO_SETTINGS_MODULE": "config.settings.base",
        "PYTHONUNBUFFERED": "1",
    }

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    manage("migrate", "--noinput", "--verbosity", "0")
    first = manage("bootstrap")
    password = re.search(r"Admin login:\s+admin / (\S+)", first).group(1)
    token = re.search(r"Service token: (\S+)", first).group(1)
    second = manage("bootstrap")
    assert "password printed on the first run" in second
    assert f"Service token: {token}" in second

    port = free_port()
    env["HOST_API_TOKEN"] = token
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def up():
            try:
                return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=30, interval=0.1)
        assert httpx.get(f"{base}/v1/docs").status_code == 200
        assert httpx.get(f"{base}/v1/schema").status_code == 200

        with httpx.Client(base_url=base, follow_redirects=True) as browser:
            login = browser.get("/admin/login/")
            csrf = browser.cookies["csrftoken"]
            page = browser.post(
                "/admin/login/?next=/admin/",
                data={
                    "username": "admin",
                    "password": password,
                    "csrfmiddlewaretoken": csrf,
                    "next": "/admin/",
                },
                headers={"Referer": f"{base}/admin/login/"},
            )
            assert login.status_code == 200
            assert "Staff console" in page.text

        auth = {"Authorization": f"Bearer {token}"}
        listing = httpx.get(f"{base}/v1/conversations", headers=auth)
        assert listing.status_code == 200
        assert "demo" in [c["id"] for c in listing.json()["results"]]
        assert httpx.get(f"{base}/v1/conversations").status_code == 401
    finally:
        server.terminate()
        server.wait(timeout=10)
