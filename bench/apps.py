from __future__ import annotations

from django.apps import AppConfig


class BenchConfig(AppConfig):
    """Installed only by `bench.settings`: registers the no-op Celery task (`bench.tasks`) and
    applies the experiments named in `BENCH_PATCH` (`bench.experiments`)."""

    name = "bench"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        from bench.experiments import apply_from_env

        apply_from_env()
