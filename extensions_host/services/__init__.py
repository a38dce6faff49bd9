"""Extension-host services: one module per concern (roster, records, documents, migrations,
commands, projection, quotas, recovery)."""
