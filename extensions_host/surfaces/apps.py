from __future__ import annotations

from django.apps import AppConfig


class SurfacesConfig(AppConfig):
    name = "extensions_host.surfaces"
    label = "ext_surfaces"
    verbose_name = "Extension surfaces"

    def ready(self) -> None:
        # Registering capabilities and listeners touches no database (spec 02: nothing that
        # needs tables runs from ready()).
        from extensions_host.surfaces import capabilities

        capabilities.register()
