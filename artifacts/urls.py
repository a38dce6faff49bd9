"""Routes of the artifact store, included under `/v1/` by config/urls.py."""

from __future__ import annotations

from django.urls import path

from artifacts import api

EMIT_PATH = "artifacts/emit"  # has its own 5 MiB body limit (apps.py)

urlpatterns = [
    path("artifacts/operations", api.OperationBeginApi.as_view(), name="artifacts-operation-begin"),
    path(
        "artifacts/operations/<path:operation_id>",
        api.OperationFollowupApi.as_view(),
        name="artifacts-operation",
    ),
    path("artifacts/attempts", api.RequestAttemptBeginApi.as_view(), name="artifacts-attempt"),
    path(EMIT_PATH, api.ArtifactEmitApi.as_view(), name="artifacts-emit"),
    path("artifacts/clear", api.ArtifactClearApi.as_view(), name="artifacts-clear"),
    path("artifacts/commit", api.CoreCommittedApi.as_view(), name="artifacts-commit"),
    path(
        "artifacts/materialization-pending",
        api.CoreMaterializationPendingApi.as_view(),
        name="artifacts-materialization-pending",
    ),
    path("artifacts/core-failed", api.CoreFailedApi.as_view(), name="artifacts-core-failed"),
    path(
        "artifacts/followup/begin", api.FollowupBeginApi.as_view(), name="artifacts-followup-begin"
    ),
    path(
        "artifacts/followup/complete",
        api.FollowupCompleteApi.as_view(),
        name="artifacts-followup-complete",
    ),
    path("artifacts/followup/fail", api.FollowupFailApi.as_view(), name="artifacts-followup-fail"),
    path(
        "artifacts/followup/resume",
        api.FollowupResumeApi.as_view(),
        name="artifacts-followup-resume",
    ),
    path(
        "artifacts/reconcile-head", api.HeadReconcileApi.as_view(), name="artifacts-reconcile-head"
    ),
    path(
        "worlds/<str:world_id>/artifacts", api.WorldArtifactsApi.as_view(), name="world-artifacts"
    ),
    path(
        "worlds/<str:world_id>/artifacts/followups",
        api.WorldFollowupsApi.as_view(),
        name="world-artifacts-followups",
    ),
    path(
        "worlds/<str:world_id>/artifacts/debug",
        api.WorldArtifactsDebugApi.as_view(),
        name="world-artifacts-debug",
    ),
]
