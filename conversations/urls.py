"""`/v1/` routes of conversations and runs (included from config/urls.py)."""

from __future__ import annotations

from django.urls import path

from conversations import api

urlpatterns = [
    path("conversations", api.ConversationListCreateApi.as_view(), name="conversations"),
    path(
        "conversations/<str:conversation_id>",
        api.ConversationDetailApi.as_view(),
        name="conversation",
    ),
    path(
        "conversations/<str:conversation_id>/fork",
        api.ConversationForkApi.as_view(),
        name="conversation-fork",
    ),
    path(
        "conversations/<str:conversation_id>/entries",
        api.ConversationEntriesApi.as_view(),
        name="conversation-entries",
    ),
    path(
        "conversations/<str:conversation_id>/submissions",
        api.SubmissionCreateApi.as_view(),
        name="conversation-submissions",
    ),
    path(
        "conversations/<str:conversation_id>/submissions/<int:submission_id>",
        api.SubmissionWithdrawApi.as_view(),
        name="conversation-submission",
    ),
    path(
        "conversations/<str:conversation_id>/runs",
        api.ConversationRunClaimApi.as_view(),
        name="conversation-runs",
    ),
    path("runs/claim", api.RunClaimApi.as_view(), name="runs-claim"),
    path("runs/<int:run_id>", api.RunDetailApi.as_view(), name="run"),
    path("runs/<int:run_id>/heartbeat", api.RunHeartbeatApi.as_view(), name="run-heartbeat"),
    path("runs/<int:run_id>/settle", api.RunSettleApi.as_view(), name="run-settle"),
    path("runs/<int:run_id>/steers", api.RunSteersApi.as_view(), name="run-steers"),
]
