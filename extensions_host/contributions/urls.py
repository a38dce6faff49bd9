"""`/v1/` routes of extension contributions (the top-level `/ui/` and `/metrics` mounts are in
`config/urls.py`, with `webui_urlpatterns` below)."""

from __future__ import annotations

from django.urls import path, re_path

from extensions_host.contributions import api, views

urlpatterns = [
    path("meta", api.MetaApi.as_view(), name="meta"),
    path("auth/check", api.AuthCheckApi.as_view(), name="auth-check"),
    path("commands", api.CommandListApi.as_view(), name="commands"),
    path(
        "conversations/<str:conversation_id>/commands/<str:name>",
        api.ConversationSlashCommandApi.as_view(),
        name="conversation-slash-command",
    ),
    path(
        "skills/<str:extension_id>/<str:skill>/<path:path>",
        api.SkillFileApi.as_view(),
        name="skill-file",
    ),
    path(
        "ext/<str:extension_id>/<path:path>",
        api.ExtensionRouteApi.as_view(),
        name="extension-route",
    ),
]

webui_urlpatterns = [
    path("", views.webui, name="webui-index"),
    re_path(r"^(?P<path>.*)$", views.webui, name="webui-file"),
]
