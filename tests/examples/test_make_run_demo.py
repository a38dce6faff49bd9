"""`make run`'s demo, driven the way the Makefile drives it, on a fresh database with a fake
clock: the bundled examples are listed (chaos is not), the roster is synced, `bootstrap` sets
up the demo conversation, then beat ticks every second. Within 90 simulated seconds the demo
reminder has fired and its attention item is in the conversation view (what the inspector
reads), the echo answer carries the digest section, and an approval is waiting."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command

from conversations.models import Submission
from core.models import AuditEntry
from extensions_host import registry

BASE_DIR = Path(settings.BASE_DIR)
MAKEFILE = (BASE_DIR / "Makefile").read_text()


def make_variable(name: str) -> str:
    """A `NAME := value` of the Makefile, with `$(CURDIR)` expanded."""
    match = re.search(rf"^{name} := (.*)$", MAKEFILE, re.MULTILINE)
    assert match is not None, name
    return match[1].replace("$(CURDIR)", str(BASE_DIR))


def run_recipe() -> list[str]:
    """The shell lines of the `run` target's recipe."""
    lines = MAKEFILE.split("\nrun: $(STAMP)\n", 1)[1].splitlines()
    recipe = []
    for line in lines:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def recipe_commands() -> list[str]:
    return [m[1] for line in run_recipe() if (m := re.search(r"manage\.py (\w+)", line))]


def demo_extensions() -> list[str]:
    return make_variable("DEMO_EXTENSIONS").split(",")


def test_make_run_installs_the_three_examples_and_not_chaos():
    assert demo_extensions() == [
        "hyphae_reminders.extension:reminders",
        "hyphae_digest.extension:digest",
        "hyphae_approvals.extension:approvals",
    ]
    assert "run: override export HOST_EXTENSIONS := $(DEMO_EXTENSIONS)" in MAKEFILE
    paths = make_variable("EXAMPLES_PATH").split(":")
    examples = ("reminders", "digest", "approvals", "chaos")
    assert paths == [str(BASE_DIR / "examples" / name) for name in examples]
    assert "run: export PYTHONPATH := $(EXAMPLES_PATH)" in MAKEFILE


def test_make_run_syncs_the_roster_before_the_demo_setup():
    commands = recipe_commands()

    assert commands.index("migrate") < commands.index("sync_roster") < commands.index("bootstrap")
    assert run_recipe()[-1].startswith("$(BIN)/honcho start")


@pytest.fixture
def make_run_env(settings: Any, tmp_path: Path, examples_importable: None) -> Iterator[None]:
    """The environment `make run` gives its commands: HOST_EXTENSIONS from the Makefile, a
    fresh var/ folder; the registry discovers from it as a process would."""
    settings.HOST_EXTENSIONS = demo_extensions()
    settings.VAR_DIR = tmp_path / "var"
    settings.HOST_DATA_DIR = tmp_path / "var" / "data"
    registry.reset()
    yield
    registry.reset()


def make_run_setup() -> str:
    """The recipe's management commands before the processes start (migrate is the test
    database's; collectstatic has nothing to do with the demo)."""
    out = io.StringIO()
    for command in recipe_commands():
        if command in ("migrate", "collectstatic"):
            continue
        call_command(command, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_on_a_first_make_run_the_demo_reminder_fires_within_90_seconds(hyphae_host, make_run_env):
    host = hyphae_host
    started = host.clock.now_ms()

    output = make_run_setup()

    assert sorted(registry.loaded()) == ["approvals", "digest", "reminders"]
    assert "a reminder is due at" in output
    assert "an approval is waiting" in output
    fired_at = None
    for _ in range(90):  # the server is ready: beat ticks every second
        host.tick(1)
        if any(i["extension"] == "reminders" for i in host.view("demo")["attention"]):
            fired_at = host.clock.now_ms()
            break
    assert fired_at is not None, "the demo reminder did not fire within 90 s"
    assert 60_000 <= fired_at - started <= 90_000

    reminder = next(i for i in host.view("demo")["attention"] if i["extension"] == "reminders")
    assert reminder["title"] == "Reminder due: Stretch your legs and look away from the screen"
    assert [p.text for p in host.sent("demo", extension_id="reminders")] == [
        "Reminder: Stretch your legs and look away from the screen"
    ]
    # the echo runtime answered the reminder with the digest's section in its prompt
    host.tick(1)
    answers = [text for role, text in host.transcript("demo") if role == "assistant"]
    assert answers[0].endswith("prompt sections: none")  # the welcome: nothing settled yet
    assert "echo: Reminder: Stretch your legs" in answers[-1]
    assert answers[-1].endswith("prompt sections: digest.summary")
    # and the approval still waits
    (approval,) = host.interactions("demo")
    assert (approval["kind"], approval["status"]) == ("approval", "pending")
    assert [a["body"] for a in host.view("demo")["ambient"]] == ["1 approval waiting"]


def test_a_second_make_run_sets_nothing_up_twice(hyphae_host, make_run_env):
    make_run_setup()
    hyphae_host.run_for(5)

    output = make_run_setup()

    assert "Demo:" not in output
    assert len(hyphae_host.records("reminders", "reminder")) == 1
    assert len(hyphae_host.interactions("demo")) == 1
    assert Submission.objects.filter(conversation_id="demo", request_id="demo-welcome").count() == 1
    assert AuditEntry.objects.filter(action="demo_setup").count() == 3


def test_chaos_is_installed_only_when_listed(db, settings, examples_importable):
    registry.reset()
    try:
        settings.HOST_EXTENSIONS = demo_extensions()
        assert "chaos" not in registry.loaded()
        registry.reset()
        settings.HOST_EXTENSIONS = [*demo_extensions(), "hyphae_chaos.extension:chaos"]
        assert "chaos" in registry.loaded()
    finally:
        registry.reset()
