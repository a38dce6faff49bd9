"""The bench URLconf: the bare baseline view beside the product's own routes (`config.urls`).
Used only with `DJANGO_SETTINGS_MODULE=bench.settings`."""

from __future__ import annotations

from django.urls import include, path

from bench import views
from config import urls as product_urls

urlpatterns = [
    path("bench/baseline/put", views.baseline_put, name="bench-baseline-put"),
    path("", include("config.urls")),
]

handler400 = product_urls.handler400
handler404 = product_urls.handler404
handler500 = product_urls.handler500
