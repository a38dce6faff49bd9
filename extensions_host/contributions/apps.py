"""App config: attaches `ctx.host` and `ctx.stores`, the secret redaction source and the
load-time contribution checks. Registration only: nothing here touches the database."""

from __future__ import annotations

from django.apps import AppConfig


class ContributionsConfig(AppConfig):
    name = "extensions_host.contributions"
    label = "ext_contributions"
    verbose_name = "Extension contributions"

    def ready(self) -> None:
        from extensions_host import registry
        from extensions_host.contributions import loading
        from extensions_host.contributions.services import hostapi, stores
        from extensions_host.runtime import register_capability, secret_sources

        register_capability("host", hostapi.HostApi)
        register_capability("stores", stores.Stores)
        if stores.secret_values not in secret_sources:
            secret_sources.append(stores.secret_values)
        if loading.on_load not in registry.load_listeners:
            registry.load_listeners.append(loading.on_load)
        from extensions_host.contributions.metrics import hook_observed
        from extensions_host.runtime.outcomes import outcome_listeners

        if hook_observed not in outcome_listeners:
            outcome_listeners.append(hook_observed)
