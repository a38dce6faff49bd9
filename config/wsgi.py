"""WSGI entry point (gunicorn sync workers serve the API)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
application = get_wsgi_application()

from config.startup import process_start  # noqa: E402

process_start()
