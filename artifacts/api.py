"""HTTP API of the artifact store (spec 06 calls over `/v1/artifacts/…`, world reads under
`/v1/worlds/{world}/artifacts`).

Every call is a POST whose body carries the call's arguments (`context` where the call takes
one), so ids of any shape stay out of paths. `emit` and `clear` answer 200 with `ok: false`
and the rejection markdown when the *model's* call is rejected; invariant errors are 409.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from artifacts import selectors, services
from artifacts.choices import ID_MAX, MESSAGE_MAX, NAME_MAX
from artifacts.serializers import (
    AttemptOutputSerializer,
    ClearOutputSerializer,
    ContextSerializer,
    DebugOutputSerializer,
    EmitOutputSerializer,
    FollowupSummarySerializer,
    OperationOutputSerializer,
    ProjectionOutputSerializer,
    ReconcileOutputSerializer,
    RequestContextSerializer,
    StrictCharField,
    id_field,
    status_field,
    summary_data,
)
from artifacts.services.followups import FAIL_STATUSES, MAX_COMPLETED_REQUESTS
from artifacts.types import OperationContext, RequestContext
from conversations.selectors import conversation_get
from core.api_base import IdPagination, ListQuerySerializer, Pagination, StrictSerializer
from core.auth import principal_of
from core.errors import MSG_INVALID_QUERY, HostError
from core.permissions import Admin, AllowAnonymousReads, Runtime
from core.schema import error_responses

WRITE_ERRORS = (400, 401, 403, 409, 413, 415)


def _valid(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _world(request: Request, world_id: str) -> None:
    """404 unless the world is a conversation the principal may read."""
    conversation_get(principal=principal_of(request), conversation_id=world_id)


def _query_text(request: Request, name: str, limit: int) -> str | None:
    """An optional query parameter: absent → None; empty, too long or with NUL → 400."""
    value = request.query_params.get(name)
    if value is None:
        return None
    if not 0 < len(value) <= limit or "\x00" in value:
        raise HostError(
            "contract", "invalid", MSG_INVALID_QUERY, details={name: ["Invalid value."]}
        )
    return value


# --- the calls (runtime) -----------------------------------------------------------------------


class OperationBeginApi(APIView):
    """`begin_operation`."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="OperationBeginInput")
    class InputSerializer(StrictSerializer):
        context = ContextSerializer()  # type: ignore[assignment]  # field name

    @extend_schema(
        operation_id="artifacts_operation_begin",
        request=InputSerializer,
        responses={200: OperationOutputSerializer, **error_responses(*WRITE_ERRORS, 404)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        operation = services.operation_begin(context=OperationContext.from_data(data["context"]))
        return Response(selectors.operation_state(operation))


class RequestAttemptBeginApi(APIView):
    """`begin_request_attempt`."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="RequestAttemptBeginInput")
    class InputSerializer(StrictSerializer):
        context = RequestContextSerializer()  # type: ignore[assignment]  # field name

    @extend_schema(
        operation_id="artifacts_request_attempt_begin",
        request=InputSerializer,
        responses={200: AttemptOutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        result = services.request_attempt_begin(context=RequestContext.from_data(data["context"]))
        return Response(AttemptOutputSerializer(result).data)


class ArtifactEmitApi(APIView):
    """`emit`: 200 with `ok: false` and the rejection markdown when the call is rejected."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="ArtifactEmitInput")
    class InputSerializer(StrictSerializer):
        context = RequestContextSerializer()  # type: ignore[assignment]  # field name
        # no length bound: an undeclared output of any length is the model's error, a rejection
        # (the body limit bounds it)
        output = StrictCharField(allow_blank=True)
        payload = serializers.JSONField(allow_null=True)
        tool_call_id = StrictCharField(max_length=ID_MAX, allow_blank=True)

    @extend_schema(
        operation_id="artifacts_emit",
        request=InputSerializer,
        responses={200: EmitOutputSerializer, **error_responses(*WRITE_ERRORS, 503)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        result = services.artifact_emit(
            context=RequestContext.from_data(data["context"]),
            output=data["output"],
            payload=data["payload"],
            tool_call_id=data["tool_call_id"],
        )
        return Response(result.as_dict())


class ArtifactClearApi(APIView):
    """`clear`: 200 with `ok: false` and the rejection markdown when the call is rejected."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="ArtifactClearInput")
    class InputSerializer(StrictSerializer):
        context = RequestContextSerializer()  # type: ignore[assignment]  # field name
        # no length bound: an undeclared output of any length is the model's error, a rejection
        # (the body limit bounds it)
        output = StrictCharField(allow_blank=True)
        tool_call_id = StrictCharField(max_length=ID_MAX, allow_blank=True)

    @extend_schema(
        operation_id="artifacts_clear",
        request=InputSerializer,
        responses={200: ClearOutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        result = services.artifact_clear(
            context=RequestContext.from_data(data["context"]),
            output=data["output"],
            tool_call_id=data["tool_call_id"],
        )
        return Response(result.as_dict())


class CoreCommittedApi(APIView):
    """`mark_core_committed`."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="CoreCommittedInput")
    class InputSerializer(StrictSerializer):
        context = ContextSerializer()  # type: ignore[assignment]  # field name
        head = id_field(help_text="The conversation's newest entry id after the core result.")

    @extend_schema(
        operation_id="artifacts_core_committed",
        request=InputSerializer,
        responses={200: OperationOutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        operation = services.operation_mark_core_committed(
            context=OperationContext.from_data(data["context"]), head=data["head"]
        )
        return Response(selectors.operation_state(operation))


class CoreMaterializationPendingApi(APIView):
    """`mark_core_materialization_pending`."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="CoreMaterializationPendingInput")
    class InputSerializer(StrictSerializer):
        context = ContextSerializer()  # type: ignore[assignment]  # field name
        head = id_field()
        message = StrictCharField(max_length=MESSAGE_MAX)

    @extend_schema(
        operation_id="artifacts_core_materialization_pending",
        request=InputSerializer,
        responses={200: FollowupSummarySerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        summary = services.operation_mark_core_materialization_pending(
            context=OperationContext.from_data(data["context"]),
            head=data["head"],
            message=data["message"],
        )
        return Response(summary_data(summary))


class CoreFailedApi(APIView):
    """`mark_core_failed` (409 when there is no such operation)."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="CoreFailedInput")
    class InputSerializer(StrictSerializer):
        operation_id = id_field()
        message = StrictCharField(max_length=MESSAGE_MAX, required=False)

    @extend_schema(
        operation_id="artifacts_core_failed",
        request=InputSerializer,
        responses={200: FollowupSummarySerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        summary = services.operation_mark_core_failed(
            operation_id=data["operation_id"], message=data.get("message")
        )
        return Response(summary_data(summary))


class FollowupBeginApi(APIView):
    """`begin_followup`."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="FollowupBeginInput")
    class InputSerializer(StrictSerializer):
        context = ContextSerializer()  # type: ignore[assignment]  # field name

    @extend_schema(
        operation_id="artifacts_followup_begin",
        request=InputSerializer,
        responses={200: FollowupSummarySerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        summary = services.followup_begin(context=OperationContext.from_data(data["context"]))
        return Response(summary_data(summary))


class FollowupCompleteApi(APIView):
    """`complete_followup`."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="FollowupCompleteInput")
    class InputSerializer(StrictSerializer):
        operation_id = id_field()
        requests = serializers.ListField(child=id_field(), max_length=MAX_COMPLETED_REQUESTS)

    @extend_schema(
        operation_id="artifacts_followup_complete",
        request=InputSerializer,
        responses={200: FollowupSummarySerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        summary = services.followup_complete(
            operation_id=data["operation_id"], requests=data["requests"]
        )
        return Response(summary_data(summary))


class FollowupFailApi(APIView):
    """`fail_followup`."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="FollowupFailInput")
    class InputSerializer(StrictSerializer):
        operation_id = id_field()
        status = status_field([str(s) for s in FAIL_STATUSES])
        message = StrictCharField(max_length=MESSAGE_MAX)
        requests = serializers.ListField(
            child=id_field(), max_length=MAX_COMPLETED_REQUESTS, required=False, default=list
        )

    @extend_schema(
        operation_id="artifacts_followup_fail",
        request=InputSerializer,
        responses={200: FollowupSummarySerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        summary = services.followup_fail(
            operation_id=data["operation_id"],
            status=data["status"],
            message=data["message"],
            requests=data["requests"],
        )
        return Response(summary_data(summary))


class FollowupResumeApi(APIView):
    """`resume_followup`."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="FollowupResumeInput")
    class InputSerializer(StrictSerializer):
        operation_id = id_field()

    @extend_schema(
        operation_id="artifacts_followup_resume",
        request=InputSerializer,
        responses={200: FollowupSummarySerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        return Response(summary_data(services.followup_resume(operation_id=data["operation_id"])))


class HeadReconcileApi(APIView):
    """`reconcile_head`."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="HeadReconcileInput")
    class InputSerializer(StrictSerializer):
        world_id = id_field(max_length=64)
        head = id_field()
        except_operation_id = id_field(required=False)

    @extend_schema(
        operation_id="artifacts_head_reconcile",
        request=InputSerializer,
        responses={200: ReconcileOutputSerializer, **error_responses(*WRITE_ERRORS, 404)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request)
        result = services.head_reconcile(
            world_id=data["world_id"],
            head=data["head"],
            except_operation_id=data.get("except_operation_id"),
        )
        return Response(ReconcileOutputSerializer(result).data)


# --- reads -------------------------------------------------------------------------------------


class OperationFollowupApi(APIView):
    """`read_followup`: the follow-up summary of one operation (the runtime reads any; others
    need read access to its conversation: `selectors.followup_read`)."""

    permission_classes = [AllowAnonymousReads]

    @extend_schema(
        operation_id="artifacts_operation_read",
        responses={200: FollowupSummarySerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, operation_id: str) -> Response:
        summary = selectors.followup_read(
            principal=principal_of(request), operation_id=operation_id
        )
        return Response(summary_data(summary))


class WorldArtifactsApi(APIView):
    """`read_active_projection`: what a front end shows, with the conversation's access."""

    permission_classes = [AllowAnonymousReads]

    @extend_schema(
        operation_id="worlds_artifacts_projection",
        parameters=[
            OpenApiParameter(
                "channel",
                {"type": "string", "minLength": 1, "maxLength": NAME_MAX},
                description="Only this channel.",
            )
        ],
        responses={200: ProjectionOutputSerializer, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, world_id: str) -> Response:
        _world(request, world_id)
        channel = _query_text(request, "channel", NAME_MAX)
        items = selectors.projection_read(world_id=world_id, channel=channel)
        return Response({"world_id": world_id, "items": items})


class FollowupPagination(Pagination):
    # by operation id in code-point order (the seed's `localeCompare` differs on case): the
    # same order on every database, `position` being the id under a binary collation
    # (`selectors.followup_operations`), never the database's own
    ordering = "position"


class DebugPagination(IdPagination):
    ordering = "-sequence"  # newest first


class WorldFollowupsApi(APIView):
    """`read_followup_summaries`, a page at a time."""

    permission_classes = [AllowAnonymousReads]

    @extend_schema(
        operation_id="worlds_artifacts_followups",
        parameters=[ListQuerySerializer],
        responses={
            200: inline_serializer(
                "WorldFollowupsPage",
                {
                    "world_id": serializers.CharField(),
                    "next": serializers.URLField(allow_null=True),
                    "previous": serializers.URLField(allow_null=True),
                    "results": FollowupSummarySerializer(many=True),
                },
            ),
            **error_responses(400, 401, 404),
        },
    )
    def get(self, request: Request, world_id: str) -> Response:
        _world(request, world_id)
        # the query is checked only once the caller may read (401/404 come first)
        paginator = FollowupPagination()
        operations = selectors.followup_operations(world_id=world_id)
        page = paginator.paginate(request, operations, view=self)
        results = [summary_data(selectors.followup_summary(op)) for op in page]
        return Response({"world_id": world_id, **paginator.links(), "results": results})


class WorldArtifactsDebugApi(APIView):
    """`read_debug` (admin): records with their effective status, newest first, a page at a
    time, with the operations they belong to."""

    permission_classes = [Admin]

    @extend_schema_serializer(component_name="WorldArtifactsDebugQuery")
    class QuerySerializer(ListQuerySerializer):
        operation_id = id_field(required=False, help_text="Only this operation.")

    @extend_schema(
        operation_id="worlds_artifacts_debug",
        parameters=[QuerySerializer],
        responses={200: DebugOutputSerializer, **error_responses(400, 401, 403, 404)},
    )
    def get(self, request: Request, world_id: str) -> Response:
        _world(request, world_id)
        paginator = DebugPagination()
        query = paginator.query(request, self.QuerySerializer)
        records = selectors.debug_records(world_id=world_id, operation_id=query.get("operation_id"))
        page = paginator.paginate(request, records, view=self)
        return Response(
            {
                "world_id": world_id,
                **paginator.links(),
                "results": selectors.debug_rows(world_id=world_id, records=page),
                "operations": selectors.operation_states(
                    world_id=world_id, operation_ids={r.operation_id for r in page}
                ),
            }
        )
