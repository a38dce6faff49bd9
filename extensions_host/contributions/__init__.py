"""Extension contributions and the host API (spec 05): HTTP routes, slash commands, notifiers,
health and meta, providers, skills, web UI bundles, the stores (secrets, settings, paths), the
host API (`ctx.host`), user deletion with transfer, the audit log admin and observability.

Services (`services/`) hold every rule; `api.py`/`views.py` and `tasks.py` are thin.
"""
