"""`docs/extending.md` is a working walkthrough and a complete reference.

The walkthrough is built from the document's own code blocks (every fenced block whose info
string carries `title="<path>"`; blocks with the same title are appended in order), written to
an empty folder and tested the way the document tells a new author to: `python -m pytest` in
that folder with the host on `PYTHONPATH`. The reference is checked against the SDK itself:
every grant, hook, lifecycle event, error kind and its HTTP mapping.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from core.errors import STATUS_BY_CAUSE
from extensions_host.contributions.services.notify import BODY_MAX, TITLE_MAX
from extensions_host.contributions.services.slash import ARGS_MAX, NOTICE_MAX
from extensions_host.sdk import (
    GRANTS,
    HOOK_GRANTS,
    LIFECYCLE_EVENTS,
    AdmissionError,
    CommandError,
    StateError,
)
from extensions_host.services import errors as error_mapping
from extensions_host.surfaces.services.ambient import CONTENT_MAX_BYTES
from extensions_host.surfaces.services.toolcalls import ARGUMENTS_MAX_BYTES, RESULT_MAX_BYTES

BASE_DIR = Path(settings.BASE_DIR)
DOC = BASE_DIR / "docs" / "extending.md"
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
TITLE = re.compile(r'title="(?P<title>[^"]+)"')


def titled_blocks(text: str) -> dict[str, str]:
    """`{path: content}` of the titled code blocks, same-titled blocks concatenated."""
    files: dict[str, str] = {}
    for match in FENCE.finditer(text):
        title = TITLE.search(match["info"])
        if title is None:
            continue
        files[title["title"]] = files.get(title["title"], "") + match["body"]
    return files


def test_the_walkthrough_declares_a_complete_package_in_titled_blocks():
    files = titled_blocks(DOC.read_text())

    assert set(files) == {
        "todo-ext/pyproject.toml",
        "todo-ext/todo_ext/__init__.py",
        "todo-ext/todo_ext/extension.py",
        "todo-ext/conftest.py",
        "todo-ext/tests/test_todo.py",
    }
    assert '[project.entry-points."hyphae.extensions"]' in files["todo-ext/pyproject.toml"]
    assert 'pytest_plugins = ["extensions_host.testing"]' in files["todo-ext/conftest.py"]


@pytest.mark.integration
def test_the_walkthrough_built_from_the_docs_own_blocks_passes_its_tests(tmp_path):
    for path, content in titled_blocks(DOC.read_text()).items():
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    project = tmp_path / "todo-ext"
    tests = (project / "tests" / "test_todo.py").read_text()
    expected = len(re.findall(r"^def test_", tests, re.MULTILINE))
    # the author's shell: the host on the path, nothing of this test run's configuration
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST", "DJANGO", "DATABASE_URL", "HOST_", "CELERY"))
    }
    env |= {"PYTHONPATH": str(BASE_DIR), "HOST_VAR_DIR": str(tmp_path / "var")}

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert expected >= 4
    assert re.search(rf"\b{expected} passed\b", output), output[-4000:]


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The rows of the first table after `heading` (cells stripped, header rows skipped)."""
    section = text.split(heading, 1)[1]
    rows = []
    started = False
    for line in section.splitlines():
        if line.startswith("|"):
            started = True
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif started:
            break
    return rows[1:]


def test_the_reference_names_every_grant_with_what_it_unlocks():
    rows = table_rows(DOC.read_text(), "### 2.3 Grants")

    assert {row[0].strip("`") for row in rows} == set(GRANTS)
    assert all(row[1] for row in rows)


def test_the_reference_names_every_hook_and_lifecycle_event():
    text = DOC.read_text()
    decorators = table_rows(text, "Decorators on an extension `ext`:")
    documented = " ".join(row[0] for row in decorators)

    for hook in HOOK_GRANTS:
        assert f"@ext.{hook}" in documented, hook
    for decorator in ("on_lifecycle", "command", "tool", "route", "slash", "notifier"):
        assert f"@ext.{decorator}" in documented, decorator
    for event in LIFECYCLE_EVENTS:
        assert f"`{event} " in text or f"`{event}`" in text, event
    hooks_table = " ".join(row[0] for row in table_rows(text, "### 2.4 Hooks"))
    for hook in ("activate", "on_timer", "on_settled", "project", "prompt", "module_for_run"):
        assert hook in hooks_table, hook


def test_the_reference_maps_every_typed_error_to_its_status():
    rows = table_rows(DOC.read_text(), "The mapping (the error body")
    documented = {row[0]: (row[1], row[2]) for row in rows}

    tables = (
        (CommandError, error_mapping._COMMAND),
        (AdmissionError, error_mapping._ADMISSION),
        (StateError, error_mapping._STATE),
    )
    for error_type, table in tables:
        assert set(table) == set(error_type.kinds)
        for kind, (category, cause) in table.items():
            raised = f'`{error_type.__name__}("{kind}")`'
            assert raised in documented, raised
            mapped, status = documented[raised]
            assert mapped.strip("`") == f"{category}/{cause}", raised
            assert int(status) == STATUS_BY_CAUSE[cause], raised


def test_the_reference_lists_every_error_kind():
    rows = table_rows(DOC.read_text(), "Typed SDK errors")
    kinds = {row[0].strip("`"): row[1] for row in rows}

    for error_type in (StateError, AdmissionError, CommandError):
        listed = {kind.strip("` ") for kind in kinds[error_type.__name__].split(",")}
        assert listed == set(error_type.kinds), error_type.__name__


def kib(size: int) -> str:
    assert size % 1024 == 0, size
    return f"{size // 1024} KiB"


def test_the_bounds_table_states_the_hosts_own_limits():
    """The bounds set by the services' constants, each in its row of §2.11 as the code says."""
    bounds = {row[0]: row[1] for row in table_rows(DOC.read_text(), "### 2.11 Bounds")}

    ambient = f"`body` and `details` together ≤ {kib(CONTENT_MAX_BYTES)} of JSON"
    assert ambient in bounds["ambient surface"]
    assert f"arguments ≤ {kib(ARGUMENTS_MAX_BYTES)} of JSON (400)" in bounds["tool call"]
    assert f"result ≤ {kib(RESULT_MAX_BYTES)} of JSON" in bounds["tool call"]
    assert "stops the extension" in bounds["tool call"]
    assert f"arguments ≤ {ARGS_MAX:,} characters (400)" in bounds["slash command"]
    assert f"`notice` cut to {NOTICE_MAX:,} characters" in bounds["slash command"]
    notification = f"title cut to {TITLE_MAX:,} characters, body to {BODY_MAX:,}"
    assert notification in bounds["notification"]
