"""ASGI entry point: uvicorn serves the long-lived event streams in production, and the whole
app (API, admin, streams) in embedded `make run`."""

import os
import threading

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
# the settings pool this process's connections (DATABASE_POOL_SIZE), and only this process's
os.environ["HYPHAE_PROCESS"] = "asgi"
django_application = get_asgi_application()

from core.middleware import AsgiBodyLimit  # noqa: E402 (once Django is set up)

# a body past its path's limit is refused while it arrives, not after Django spooled it whole
application = AsgiBodyLimit(django_application)

from config.startup import process_start  # noqa: E402

# uvicorn imports this module inside its running event loop, where Django refuses synchronous
# database work: the start-up sync runs on a plain thread instead, and what it raises is raised
# here (a thread would only print it), so uvicorn refuses to start exactly when gunicorn does.
_failure: list[BaseException] = []


def _start_in_thread() -> None:
    try:
        process_start()
    except BaseException as exc:
        _failure.append(exc)


_start = threading.Thread(target=_start_in_thread, name="hyphae-startup")
_start.start()
_start.join()
if _failure:
    raise _failure[0]
