"""Stored idempotency results are pruned after 24 hours (host clock), in pages (spec 01, 03)."""

from __future__ import annotations

import datetime as dt
from functools import partial

import pytest

from core import clock, services, tasks
from core.models import IdempotencyResult

pytestmark = pytest.mark.django_db


def stored(key: str, *, age: dt.timedelta) -> IdempotencyResult:
    return IdempotencyResult.objects.create(
        scope="test",
        key=key,
        request_fingerprint="f",
        status=200,
        body={},
        created_at=clock.now() - age,
    )


def test_a_result_is_stamped_on_the_host_clock_and_pruned_a_day_later_on_it(fake_clock):
    row = IdempotencyResult.objects.create(
        scope="test", key="k", request_fingerprint="f", status=200, body={}
    )
    assert row.created_at == clock.now()
    fake_clock.advance(seconds=23 * 3600)
    assert services.idempotency_prune() == (0, False)
    fake_clock.advance(seconds=2 * 3600)
    assert services.idempotency_prune() == (1, False)


def test_a_result_younger_than_24_hours_is_kept_and_an_older_one_deleted(fake_clock):
    young = stored("young", age=dt.timedelta(hours=23))
    old = stored("old", age=dt.timedelta(hours=25))
    assert services.idempotency_prune() == (1, False)
    assert list(IdempotencyResult.objects.values_list("pk", flat=True)) == [young.pk]
    assert not IdempotencyResult.objects.filter(pk=old.pk).exists()
    fake_clock.advance(seconds=2 * 3600)  # the young one is now 25 hours old
    assert services.idempotency_prune() == (1, False)
    assert not IdempotencyResult.objects.exists()


def test_a_prune_deletes_one_page_oldest_first(fake_clock):
    rows = [stored(f"k{n}", age=dt.timedelta(hours=30 - n)) for n in range(5)]
    assert services.idempotency_prune(limit=2) == (2, True)
    assert set(IdempotencyResult.objects.values_list("pk", flat=True)) == {r.pk for r in rows[2:]}


def test_the_prune_task_re_enqueues_itself_while_pages_are_full(
    fake_clock, monkeypatch, django_capture_on_commit_callbacks
):
    for n in range(5):
        stored(f"k{n}", age=dt.timedelta(hours=25))
    monkeypatch.setattr(services, "idempotency_prune", partial(services.idempotency_prune, limit=2))
    enqueued: list[int] = []
    monkeypatch.setattr(tasks.prune, "delay", lambda: enqueued.append(1))
    calls = 0
    while True:
        calls += 1
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            tasks.prune()
        if not callbacks:
            break
    assert not IdempotencyResult.objects.exists()
    assert calls == 3  # 2 + 2 full pages re-enqueue; the last page (1) does not
    assert len(enqueued) == 2
