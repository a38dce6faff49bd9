from __future__ import annotations

from django.apps import AppConfig

EMIT_BODY_LIMIT = 5 * 1024 * 1024  # room for a 4 MiB payload and its context (spec 07)


class ArtifactsConfig(AppConfig):
    name = "artifacts"
    verbose_name = "Artifacts"

    def ready(self) -> None:
        from artifacts.urls import EMIT_PATH
        from core.middleware import body_limits_replace

        path = f"/v1/{EMIT_PATH}"
        body_limits_replace(path, {path: EMIT_BODY_LIMIT})
