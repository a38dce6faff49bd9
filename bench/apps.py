from __future__ import annotations

from django.apps import AppConfig


class BenchConfig(AppConfig):
    """Installed only by `bench.settings`: registers the no-op Celery task (`bench.tasks`)."""

    name = "bench"
    verbose_name = "Benchmarks"
