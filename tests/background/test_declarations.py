"""Workers and jobs declare the grant they run under (spec 03), or the definition is refused."""

from __future__ import annotations

import pytest

from extensions_host.background.declarations import (
    Job,
    PromptAction,
    Worker,
    add_job,
    add_worker,
    jobs_of,
    workers_of,
)
from extensions_host.sdk import DefinitionError, Extension


def _noop(ctx, item):  # pragma: no cover - never called
    return None


def test_a_worker_without_the_lifecycle_grant_is_refused_at_definition():
    ext = Extension(id="nolife", version="1", grants={"timers"})

    with pytest.raises(DefinitionError, match="worker idle but does not request the lifecycle"):
        add_worker(ext, Worker("idle", wake_on=["conversation_idle"], run=_noop))

    assert workers_of(ext) == ()


def test_a_job_without_the_timers_grant_is_refused_at_definition():
    ext = Extension(id="notimers", version="1", grants={"lifecycle"})

    with pytest.raises(DefinitionError, match="job daily but does not request the timers"):
        add_job(ext, Job("daily", schedule="0 8 * * *", action=_noop))

    assert jobs_of(ext) == ()


def test_a_prompt_job_also_needs_the_send_grant():
    ext = Extension(id="nosend", version="1", grants={"timers"})
    prompt = PromptAction(conversation_id="inbox", text="Anything new?")

    with pytest.raises(DefinitionError, match="prompt job ask but does not request the send"):
        add_job(ext, Job("ask", every_seconds=3600, action=prompt))

    assert jobs_of(ext) == ()


def test_declarations_with_their_grants_are_attached():
    ext = Extension(id="granted", version="1", grants={"timers", "lifecycle", "send"})

    add_worker(ext, Worker("idle", wake_on=["conversation_idle"], run=_noop))
    add_job(ext, Job("ask", every_seconds=3600, action=PromptAction("inbox", "Anything new?")))

    assert [w.name for w in workers_of(ext)] == ["idle"]
    assert [j.name for j in jobs_of(ext)] == ["ask"]
