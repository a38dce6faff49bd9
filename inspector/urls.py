"""`/inspect/` routes (included once from config/urls.py)."""

from __future__ import annotations

from django.urls import path

from inspector import views

app_name = "inspector"

urlpatterns = [
    path("<str:conversation_id>", views.inspector_page, name="page"),
    path("<str:conversation_id>/fragments", views.inspector_fragments, name="fragments"),
    path(
        "<str:conversation_id>/artifacts/<str:record_id>",
        views.artifact_frame,
        name="artifact-frame",
    ),
]
