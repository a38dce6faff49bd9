from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Host core"

    def ready(self) -> None:
        from core import schema  # noqa: F401  (registers the OpenAPI auth schemes)
