"""The SDK is the only module an extension imports (docs/extending.md §2): every type the
reference names for a hook signature is importable from `extensions_host.sdk`, and the
decorators take every option the reference gives them (notifier and slash deadlines)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from conversations.selectors import RunSettledEvent
from extensions_host import sdk
from extensions_host.background.services.reader import LifecycleEventView
from extensions_host.sdk import DefinitionError, Extension

DOC = Path(settings.BASE_DIR) / "docs" / "extending.md"


def reference() -> str:
    text = DOC.read_text()
    return text[text.index("## 2. The SDK reference") : text.index("### 2.12")]


def decorator_table(text: str) -> str:
    start = text.index("| decorator | hook signature | grant |")
    return text[start : text.index("\n\n", start)]


def test_every_type_in_the_hook_signatures_of_the_reference_is_exported_by_the_sdk():
    table = decorator_table(reference())
    # `runs: list[RunSettledEvent]`, `event: LifecycleEvent`, `-> list[CatalogEntry]`, …
    named = set(re.findall(r"(?::|->)\s*(?:list\[)?([A-Z][A-Za-z]+)", table))

    assert {"RunSettledEvent", "LifecycleEvent", "TimerEvent", "RunInfo"} <= named
    missing = sorted(name for name in named - {"JSON"} if name not in sdk.__all__)
    assert missing == []


def test_every_name_the_reference_imports_from_the_sdk_is_importable():
    imported = {
        name.strip()
        for line in re.findall(r"from extensions_host\.sdk import (\w+(?:, \w+)*)", reference())
        for name in line.split(",")
    }

    assert "Worker" in imported
    for name in sorted(imported):
        exec(f"from extensions_host.sdk import {name}", {})  # noqa: S102 (names from our doc)


def test_the_settled_and_lifecycle_event_types_are_the_ones_hooks_receive():
    from extensions_host.sdk import LifecycleEvent
    from extensions_host.sdk import RunSettledEvent as Exported

    assert Exported is RunSettledEvent
    assert LifecycleEvent is LifecycleEventView
    assert set(sdk.__all__) <= set(dir(sdk)) | set(sdk._LAZY)


def test_importing_the_sdk_imports_neither_the_orm_models_nor_the_runtime():
    probe = (
        "import sys; import extensions_host.sdk as sdk; "
        "assert 'conversations.selectors' not in sys.modules; "
        "assert 'extensions_host.background.services.reader' not in sys.modules; "
        "print(sdk.SDK_VERSION)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_notifier_and_slash_decorators_take_their_own_deadline():
    ext = Extension(id="deadlines", version="1", grants={"notify", "commands"})

    ext.notifier("log", deadline_s=60)(lambda ctx, event: None)
    ext.slash("todo", deadline_s=12.5)(lambda ctx, invocation: None)

    (notifier,) = ext.contributions.notifiers
    (command,) = ext.contributions.slash_commands
    assert (notifier.deadline_s, command.deadline_s) == (60, 12.5)


@pytest.mark.parametrize("deadline_s", [0, -1, 301, True, "10"])
def test_a_notifier_or_slash_deadline_outside_0_300_is_refused_as_a_route_s_is(deadline_s):
    ext = Extension(id="deadlines", version="1", grants={"notify", "commands", "routes"})

    for declare in (
        lambda: ext.notifier("log", deadline_s=deadline_s)(lambda ctx, event: None),
        lambda: ext.slash("todo", deadline_s=deadline_s)(lambda ctx, invocation: None),
        lambda: ext.route("GET", "x", deadline_s=deadline_s)(lambda ctx, request: None),
    ):
        with pytest.raises(DefinitionError, match=r"deadline_s must be in \(0, 300\]"):
            declare()
