"""`/v1/` routes of the conversation capabilities (included from config/urls.py)."""

from __future__ import annotations

from django.urls import path

from extensions_host.surfaces import api, events

urlpatterns = [
    path("runs/<int:run_id>/tool-calls", api.RunToolCallApi.as_view(), name="run-tool-calls"),
    path(
        "conversations/<str:conversation_id>/interactions",
        api.ConversationInteractionListApi.as_view(),
        name="conversation-interactions",
    ),
    path(
        "conversations/<str:conversation_id>/interactions/<path:call_id>/answer",
        api.ConversationInteractionAnswerApi.as_view(),
        name="conversation-interaction-answer",
    ),
    # served by the ASGI process (uvicorn config.asgi): see events.py
    path(
        "conversations/<str:conversation_id>/events",
        events.conversation_events,
        name="conversation-events",
    ),
]
