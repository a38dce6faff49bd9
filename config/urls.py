"""Top-level URLs. Each app owns its `/v1/` routes in its own urls module."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerSplitView

from core import api as core_api
from extensions_host.contributions import urls as contributions_urls
from extensions_host.contributions import views as contributions_views

# the staff console's branding (page titles, the header and the index heading)
admin.site.site_header = "Hyphae console"
admin.site.site_title = "Hyphae console"
admin.site.index_title = "Staff console"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("inspect/", include("inspector.urls")),
    path("healthz", core_api.HealthzApi.as_view(), name="healthz"),
    path("readyz", core_api.ReadyzApi.as_view(), name="readyz"),
    path("v1/schema", core_api.SchemaApi.as_view(), name="schema"),
    path("v1/docs", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
    path("v1/auth/tokens", core_api.TokenListCreateApi.as_view(), name="tokens"),
    path("v1/auth/tokens/<int:token_id>", core_api.TokenRevokeApi.as_view(), name="token-revoke"),
    path("v1/", include("conversations.urls")),
    path("v1/", include("extensions_host.urls")),
    path("v1/", include("extensions_host.surfaces.urls")),
    path("v1/", include("artifacts.urls")),
    path("v1/", include("extensions_host.contributions.urls")),
    path("ui/", include(contributions_urls.webui_urlpatterns)),
    path("metrics", contributions_views.metrics, name="metrics"),
    path("v1/", include("extensions_host.background.urls")),
]

handler400 = "core.views.bad_request"
handler404 = "core.views.not_found"
handler500 = "core.views.server_error"
