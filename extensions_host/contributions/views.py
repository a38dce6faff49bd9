"""Plain Django views outside the JSON API: the selected web UI bundle at `/ui/` and the
Prometheus `/metrics` text."""

from __future__ import annotations

from django.http import FileResponse, HttpRequest, HttpResponse, HttpResponseBase
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST

from core.errors import MSG_NOT_FOUND, MSG_UNAUTHENTICATED, HostError
from core.middleware import json_error
from core.views import read_only_api_view
from extensions_host.contributions.metrics import metrics_allowed, metrics_text
from extensions_host.contributions.packages import content_type_of
from extensions_host.contributions.services.bundles import bundle_file


@require_safe
def webui(request: HttpRequest, path: str = "") -> HttpResponseBase:
    """A file of the selected bundle (`/ui/` → `index.html`): safe content types, no listing,
    nothing outside the bundle; anything else is a plain 404. The strict CSP of the settings
    applies (the bundle renders produced content)."""
    try:
        found = bundle_file(path=path)
    except HostError:
        return HttpResponse(MSG_NOT_FOUND, status=404, content_type="text/plain; charset=utf-8")
    content_type, attachment = content_type_of(found)
    response = FileResponse(found.open("rb"), content_type=content_type, as_attachment=attachment)
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "no-cache" if found.name == "index.html" else "max-age=300"
    return response


@read_only_api_view
def metrics(request: HttpRequest) -> HttpResponse:
    if not metrics_allowed(request):
        response = json_error(HostError("auth", "unauthenticated", MSG_UNAUTHENTICATED))
        response["WWW-Authenticate"] = 'Bearer realm="hyphae-metrics"'
        return response
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_LATEST)
