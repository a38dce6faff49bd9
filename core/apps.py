import logging

from django.apps import AppConfig
from django.conf import settings
from django.core import checks

logger = logging.getLogger(__name__)

MSG_AUTH_NONE = (
    "HOST_AUTH=none: every request acts as the local admin `dev`, without credentials "
    "(local development only)"
)


@checks.register(checks.Tags.security)
def auth_off_warning(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """Spec 05: `HOST_AUTH=none` warns, at start and in `check --deploy`."""
    if settings.HOST_AUTH != "none":
        return []
    return [checks.Warning(MSG_AUTH_NONE, id="hyphae.W001")]


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Host core"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete

        from core import checks as _deploy_checks  # noqa: F401  (registers them)
        from core import schema  # noqa: F401  (registers the OpenAPI auth schemes)
        from core.auth import forget_service_user

        post_delete.connect(
            forget_service_user, sender=get_user_model(), dispatch_uid="forget_service_user"
        )
        if settings.HOST_AUTH == "none":
            logger.warning(MSG_AUTH_NONE)
