"""Delivery tasks retry on their own after transient database trouble: their consumer's kick
stays set meanwhile, so nothing else would enqueue them again for a while."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError, ProgrammingError

from extensions_host.background import tasks
from extensions_host.background.services import lifecycle, settled


@pytest.mark.parametrize(
    ("task", "service", "name"),
    [
        (tasks.deliver_settled, settled, "settled_deliver_all"),
        (tasks.deliver_lifecycle, lifecycle, "lifecycle_deliver_all"),
    ],
)
def test_a_delivery_that_met_the_database_down_is_retried(task, service, name, monkeypatch):
    calls: list[str] = []

    def flaky(*, extension_id: str) -> bool:
        calls.append(extension_id)
        if len(calls) < 3:
            raise OperationalError("server closed the connection unexpectedly")
        return False

    monkeypatch.setattr(service, name, flaky)

    result = task.apply(args=["alpha"])  # eager: retries run at once

    assert result.successful()
    assert calls == ["alpha"] * 3


def test_a_delivery_failing_for_another_reason_is_not_retried(monkeypatch):
    calls: list[Any] = []

    def broken(*, extension_id: str) -> bool:
        calls.append(extension_id)
        raise ProgrammingError("column does not exist")

    monkeypatch.setattr(settled, "settled_deliver_all", broken)

    result = tasks.deliver_settled.apply(args=["alpha"])

    assert result.failed()
    assert calls == ["alpha"]
