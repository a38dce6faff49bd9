"""Browser tests: the system Chromium driven by Playwright against real host processes (a
uvicorn web process serving the pages, the API and the event stream on one origin, and a
Celery worker running the echo runtime), all on the test database.

Skipped with a visible reason when Chromium or Playwright is missing. Never downloads a
browser: Playwright launches `/usr/bin/chromium` (`.ci/run` installs it from the
distribution's packages when it is missing).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from extensions_host import registry
from extensions_host.runtime import forget_activations
from extensions_host.services.roster import roster_sync
from tests.integration import conftest as integration
from tests.integration.conftest import ROOT, Processes, wait_until

from . import exts

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# the integration harness's fixtures (real processes on the test database and broker) and its
# report hook (it prints the processes' logs when a test fails)
broker = integration.broker
processes = integration.processes
pytest_runtest_makereport = integration.pytest_runtest_makereport

SCREENSHOTS = ROOT / "build" / "screenshots"
PASSWORD = "browser-test-password-7719"  # a throwaway test account
EXTENSIONS = ["tests.browser.exts:lookout", "tests.browser.exts:flaky"]

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # pragma: no cover - the dev requirements install it
    sync_playwright = None  # type: ignore[assignment]


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Skip the browser tests, with the reason shown, where they cannot run."""
    reason = None
    if sync_playwright is None:
        reason = "needs Playwright: pip install -r requirements-dev.txt"
    elif not Path(CHROMIUM).exists():
        reason = f"needs Chromium at {CHROMIUM} (apt-get install chromium)"
    if reason is None:
        return
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    # Playwright's sync API keeps an event loop in this thread while it is open; the tests'
    # own database calls (and the test database's setup) are still plain synchronous code
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield launched
            launched.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(15_000)
    opened = context.new_page()
    yield opened
    context.close()


@pytest.fixture(scope="session")
def static_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`collectstatic` once per session (the web process serves it with WhiteNoise)."""
    var = tmp_path_factory.mktemp("static-var")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(DJANGO_SETTINGS_MODULE="config.settings.base", HOST_VAR_DIR=str(var))
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=120,
    )
    return var / "static"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Host:
    url: str
    username: str
    password: str
    processes: Processes

    def screenshot(self, page: Page, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def host(
    processes: Processes,
    static_root: Path,
    settings: Any,
    django_user_model: Any,
    tmp_path: Path,
) -> Iterator[Host]:
    """A staff account, the test extensions installed here and in the served processes, and
    a uvicorn web process (pages, API and event stream on one origin)."""
    settings.HOST_EXTENSIONS = EXTENSIONS
    settings.AGENT_RUNTIME = "echo"
    stack = ExitStack()
    stack.enter_context(registry.installed(exts.lookout, exts.flaky))
    forget_activations()
    roster_sync()
    # the served processes run the base settings' password hashers, not the test's MD5
    django_user_model.objects.create(
        username="admin",
        is_staff=True,
        is_superuser=True,
        password=PBKDF2PasswordHasher().encode(PASSWORD, "browsertestsalt", iterations=1000),
    )
    var = Path(processes.broker.env.get("HOST_VAR_DIR") or tmp_path / "var")
    var.mkdir(parents=True, exist_ok=True)
    if not (var / "static").exists():
        shutil.copytree(static_root, var / "static")
    port = free_port()
    processes.start(
        "web",
        [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--timeout-graceful-shutdown",
            "2",
        ],
        HOST_VAR_DIR=str(var),
        HOST_SSE_POLL_SECONDS="0.2",
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, timeout=60, interval=0.2)
    except AssertionError:
        print(processes.logs())
        raise
    yield Host(url=url, username="admin", password=PASSWORD, processes=processes)
    stack.close()
    forget_activations()


def log_in(page: Page, host: Host, next_path: str = "/admin/") -> None:
    """Log in through the admin's login form."""
    page.goto(f"{host.url}/admin/login/?next={next_path}")
    page.fill("#id_username", host.username)
    page.fill("#id_password", host.password)
    page.click("input[type=submit]")
    page.wait_for_url(f"{host.url}{next_path}")
