"""SDK identifiers are matched whole: `^…$` with `re.match` let a trailing newline through
("foo\\n"), so an extension id or a declared name could carry one into the roster, URLs and
logs."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from extensions_host.sdk import Collection, DefinitionError, Extension, Notifier, Provider


class Note(BaseModel):
    id: str


def test_a_well_formed_extension_id_and_names_are_accepted():
    ext = Extension(
        id="notes",
        version="1.0.0",
        grants={"state", "commands", "run_tools"},
        collections={"note": Collection(Note, key=lambda n: n.id)},
    )
    ext.command("add", scope="global", input=Note)(lambda ctx, data: None)
    ext.tool("lookup", input=Note)(lambda ctx, run, arguments: None)
    assert ext.id == "notes"


@pytest.mark.parametrize("bad", ["foo\n", "\nfoo", "Foo", "9lives", "a" * 64, "", None])
def test_an_extension_id_that_is_not_exactly_an_id_is_refused(bad):
    with pytest.raises(DefinitionError):
        Extension(id=bad, version="1.0.0")


def test_a_contributor_name_with_a_trailing_newline_is_refused():
    with pytest.raises(DefinitionError):
        Extension(name="foo\n")


@pytest.mark.parametrize("bad", ["note\n", "Note", "", 5])
def test_declared_names_are_matched_whole(bad):
    ext = Extension(id="notes", version="1.0.0", grants={"state", "commands", "run_tools"})
    with pytest.raises(DefinitionError):
        ext.command(bad, scope="global", input=Note)
    with pytest.raises(DefinitionError):
        ext.tool(bad, input=Note)
    with pytest.raises(DefinitionError):
        Extension(
            id="notes",
            version="1.0.0",
            grants={"state"},
            collections={bad: Collection(Note, key=lambda n: n.id)},
        )
    with pytest.raises(DefinitionError):
        Notifier(name=bad, notify=lambda *a: None)
    with pytest.raises(DefinitionError):
        Provider(name=bad, models="m")


@pytest.mark.parametrize("bad", [True, "5", 0, 301])
def test_an_extension_deadline_is_checked_like_every_other_deadline(bad):
    with pytest.raises(DefinitionError, match=r"deadline_s must be in \(0, 300\]"):
        Extension(id="notes", version="1.0.0", deadline_s=bad)


def test_worker_and_job_names_are_matched_whole():
    from extensions_host.sdk import Job, Worker

    with pytest.raises(DefinitionError):
        Worker("tidy\n", wake_on=["conversation_archived"], run=lambda ctx, wake: None)
    with pytest.raises(DefinitionError):
        Job(name="tidy\n", action=lambda ctx, run: None, every_seconds=60)
    assert Job(name="tidy", action=lambda ctx, run: None, every_seconds=60).name == "tidy"
