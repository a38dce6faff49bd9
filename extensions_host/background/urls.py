"""`/v1/` routes of background work."""

from __future__ import annotations

from django.urls import path

from extensions_host.background import api

urlpatterns = [
    path("jobs", api.JobListApi.as_view(), name="jobs"),
    path("jobs/<str:job_id>/trigger", api.JobTriggerApi.as_view(), name="job-trigger"),
]
