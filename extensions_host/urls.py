"""`/v1/` routes of the extension host."""

from __future__ import annotations

from django.urls import path

from extensions_host import api

urlpatterns = [
    path("extensions", api.ExtensionListApi.as_view(), name="extensions"),
    path(
        "extensions/<str:extension_id>", api.ExtensionDetailApi.as_view(), name="extension-detail"
    ),
    path(
        "extensions/<str:extension_id>/resume",
        api.ExtensionResumeApi.as_view(),
        name="extension-resume",
    ),
    path(
        "extensions/<str:extension_id>/commands/<str:name>",
        api.ExtensionCommandApi.as_view(),
        name="extension-command",
    ),
    path(
        "conversations/<str:conversation_id>/extensions/<str:extension_id>/commands/<str:name>",
        api.ConversationExtensionCommandApi.as_view(),
        name="conversation-extension-command",
    ),
    path(
        "conversations/<str:conversation_id>/projection",
        api.ConversationProjectionApi.as_view(),
        name="conversation-projection",
    ),
]
