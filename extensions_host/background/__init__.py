"""Background work on Celery (spec 03): timers with precise wakes, settled-run delivery with
cursors, the lifecycle outbox, workers, jobs, idle detection.

Services (`services/`) hold every rule; tasks (`tasks.py`) are thin; the runtime
(`extensions_host.runtime`) is the one place a hook is ever called.
"""
