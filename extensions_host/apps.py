from django.apps import AppConfig


class ExtensionsHostConfig(AppConfig):
    name = "extensions_host"
    verbose_name = "Extensions"
