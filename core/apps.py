from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Host core"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete

        from core import schema  # noqa: F401  (registers the OpenAPI auth schemes)
        from core.auth import forget_service_user

        post_delete.connect(
            forget_service_user, sender=get_user_model(), dispatch_uid="forget_service_user"
        )
