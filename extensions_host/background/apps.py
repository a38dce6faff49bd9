"""App config: attaches `ctx.timers`, the roster-detail sections and the after-commit triggers."""

from __future__ import annotations

from django.apps import AppConfig


class BackgroundConfig(AppConfig):
    name = "extensions_host.background"
    label = "ext_background"
    verbose_name = "Background work"

    def ready(self) -> None:
        # Wiring only (no database access here): every piece is a registration into a hook
        # point another app exposes, so neither core nor the runtime imports this app.
        from extensions_host.background import signals

        signals.connect()
