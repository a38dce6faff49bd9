"""Job endpoints (spec 07): `GET /v1/jobs`, `POST /v1/jobs/{id}/trigger` (admin). Thin views:
validate, call one service or selector, serialise."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api_base import EmptyInputSerializer, ListQuerySerializer, RowsPagination, paginated
from core.auth import principal_of
from core.permissions import Admin, Authenticated
from core.schema import error_responses
from extensions_host.background.services.jobs import job_trigger, jobs_list


class JobSerializer(serializers.Serializer):
    id = serializers.CharField()
    extension_id = serializers.CharField()
    name = serializers.CharField()
    schedule = serializers.CharField()
    action = serializers.ChoiceField(choices=["task", "prompt"])
    overlap = serializers.ChoiceField(choices=["skip", "buffer_one"])
    catch_up = serializers.ChoiceField(choices=["skip", "once"])
    next_run_at = serializers.DateTimeField(allow_null=True)
    last_run_at = serializers.DateTimeField(allow_null=True)
    last_outcome = serializers.CharField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)
    runs = serializers.IntegerField()
    failures = serializers.IntegerField()
    missed_runs = serializers.IntegerField()
    last_missed_at = serializers.DateTimeField(allow_null=True)
    overlap_skips = serializers.IntegerField()


JobPage = paginated(JobSerializer, "JobPage")


class JobPagination(RowsPagination):
    def position_of(self, row: dict[str, Any]) -> str:
        return row["id"]  # `ext:<extension>:<name>`: unique, and the order of `jobs_list`


class JobListApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema(
        operation_id="jobs_list",
        summary="Declared jobs with next and last run, outcome and missed runs, by id",
        parameters=[ListQuerySerializer],
        responses={200: JobPage, **error_responses(400, 401)},
    )
    def get(self, request: Request) -> Response:
        paginator = JobPagination()
        page = paginator.paginate(request, jobs_list(), view=self)
        return paginator.get_paginated_response(JobSerializer(page, many=True).data)


class JobTriggerApi(APIView):
    permission_classes = [Admin]

    class OutputSerializer(serializers.Serializer):
        job_id = serializers.CharField()
        queued = serializers.BooleanField()

    @extend_schema(
        operation_id="jobs_trigger",
        summary="Run a job now (admin); the run respects the job's overlap rule",
        request=EmptyInputSerializer,
        responses={202: OutputSerializer, **error_responses(400, 401, 403, 404, 413, 415, 503)},
    )
    def post(self, request: Request, job_id: str) -> Response:
        # no body, or `{}`: any other JSON (`[]`, `null`, `0`, a field) is a 400
        EmptyInputSerializer(data=request.data).is_valid(raise_exception=True)
        actor = principal_of(request).user.get_username()
        job_trigger(job_id=job_id, actor=actor)
        data = self.OutputSerializer({"job_id": job_id, "queued": True}).data
        return Response(data, status=status.HTTP_202_ACCEPTED)
