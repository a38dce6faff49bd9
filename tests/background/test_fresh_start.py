"""A fresh start (spec 02 §7): a resume, or a new revision, gives every pending item of the
extension its whole `Retry` budget again, and leaves the other extensions' counts alone."""

from __future__ import annotations

import pytest

from extensions_host.background.models import (
    JobState,
    JobTrigger,
    LifecycleDelivery,
    SettledCursor,
    Timer,
)
from extensions_host.models import ExtensionStatus, RosterEntry

from .conftest import resume
from .exts import make_ext


def retried(extension_id: str) -> dict[str, int]:
    """The `Retry` count of one pending item of each kind."""
    return {
        "timer": Timer.objects.get(extension_id=extension_id).retry_attempt,
        "settled": SettledCursor.objects.get(pk=extension_id).retry_attempt,
        "lifecycle": LifecycleDelivery.objects.get(extension_id=extension_id).retry_attempt,
        "job": JobTrigger.objects.get(job__extension_id=extension_id).retry_attempt,
    }


@pytest.fixture
def mid_retry(install):
    """alpha and beta, each with one item of every kind 3 `Retry`s in, alpha stopped."""

    def make() -> None:
        for ext_id in ("alpha", "beta"):
            Timer.objects.create(extension_id=ext_id, key="k", due_at=0, fire_at=0, retry_attempt=3)
            SettledCursor.objects.update_or_create(pk=ext_id, defaults={"retry_attempt": 3})
            LifecycleDelivery.objects.create(
                extension_id=ext_id, event_id=1, kind="conversation.created", retry_attempt=3
            )
            job = JobState.objects.create(id=f"ext:{ext_id}:nightly", extension_id=ext_id)
            JobTrigger.objects.create(job=job, actor="retry", not_before=0, retry_attempt=3)
        RosterEntry.objects.filter(pk="alpha").update(
            status=ExtensionStatus.STOPPED, reason="on_timer defect: retried 10 times: down"
        )

    return make


def test_a_resume_resets_every_pending_items_retry_count_of_that_extension_only(install, mid_retry):
    install(make_ext("alpha"), make_ext("beta"))
    mid_retry()

    resume("alpha")

    assert retried("alpha") == {"timer": 0, "settled": 0, "lifecycle": 0, "job": 0}
    assert retried("beta") == {"timer": 3, "settled": 3, "lifecycle": 3, "job": 3}


def test_a_new_revision_resets_the_retry_counts_too(install, mid_retry):
    install(make_ext("alpha"), make_ext("beta"))
    mid_retry()

    install(make_ext("alpha", version="2.0.0"), make_ext("beta"))

    assert RosterEntry.objects.get(pk="alpha").status == ExtensionStatus.RUNNING
    assert retried("alpha") == {"timer": 0, "settled": 0, "lifecycle": 0, "job": 0}
    assert retried("beta") == {"timer": 3, "settled": 3, "lifecycle": 3, "job": 3}
