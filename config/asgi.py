"""ASGI entry point: uvicorn serves the long-lived event streams in production, and the whole
app (API, admin, streams) in embedded `make run`."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
application = get_asgi_application()

from config.startup import process_start  # noqa: E402

process_start()
