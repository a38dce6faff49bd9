"""The host-wide backlog figures of background work: settled cursor lag per consumer, the timer
backlog and its oldest due timer, the lifecycle outbox. One place computes them for
`GET /v1/meta` (its `lag`), `/metrics` and the staff console's dashboard.

Set-based: a fixed number of queries (six at most) whatever the number of extensions, so a
scrape or a page load never costs a query per extension.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Exists, Min, OuterRef, Q

from core import clock
from core.models import LifecycleEvent
from extensions_host.background.models import (
    LifecycleDelivery,
    LifecycleFanout,
    SettledCursor,
    Timer,
)
from extensions_host.background.services.settled import GRANT as SETTLED_GRANT
from extensions_host.background.services.settled import core_cursor
from extensions_host.models import ExtensionStatus, RosterEntry


def backlog_figures() -> dict[str, Any]:
    """Figures over the installed (not uninstalled) extensions:

    - `settled`: `core_cursor`; `consumers`, each extension with the `settled` grant admitted
      → `{cursor, core_cursor, lag}` (`cursor` and `lag` None before its cursor exists);
      `max_lag`;
    - `timers`: `pending`, `due`, `oldest_due_at` (epoch ms) and `oldest_due_age_ms`;
    - `outbox`: `unfanned` (events not fanned out yet) and `pending` (deliveries waiting, by
      extension; every extension's, as they are what the deliverers have left to do).
    """
    now = clock.now_ms()
    core = core_cursor()
    installed = RosterEntry.objects.exclude(status=ExtensionStatus.UNINSTALLED)
    consumers_ids = [
        extension_id
        for extension_id, grants in installed.values_list("id", "admitted_grants")
        if SETTLED_GRANT in (grants or [])
    ]
    positions = dict(
        SettledCursor.objects.filter(pk__in=consumers_ids).values_list("pk", "position")
        if consumers_ids
        else ()
    )
    consumers = {
        extension_id: {
            "cursor": positions.get(extension_id),
            "core_cursor": core,
            "lag": None
            if positions.get(extension_id) is None
            else max(core - positions[extension_id], 0),
        }
        for extension_id in sorted(consumers_ids)
    }
    due = Q(fire_at__lte=now)
    timers = Timer.objects.exclude(extension__status=ExtensionStatus.UNINSTALLED).aggregate(
        pending=Count("id"), due=Count("id", filter=due), oldest_due=Min("fire_at", filter=due)
    )
    oldest = timers["oldest_due"]
    unfanned = LifecycleEvent.objects.filter(
        ~Exists(LifecycleFanout.objects.filter(event_id=OuterRef("pk")))
    ).count()
    pending = dict(
        LifecycleDelivery.objects.values_list("extension_id")
        .annotate(n=Count("id"))
        .order_by("extension_id")
    )
    return {
        "settled": {
            "core_cursor": core,
            "consumers": consumers,
            "max_lag": max((c["lag"] or 0 for c in consumers.values()), default=0),
        },
        "timers": {
            "pending": timers["pending"],
            "due": timers["due"],
            "oldest_due_at": oldest,
            "oldest_due_age_ms": None if oldest is None else now - oldest,
        },
        "outbox": {"unfanned": unfanned, "pending": pending},
    }
