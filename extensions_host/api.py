"""Extension endpoints (spec 04, 07): the roster, resume, extension commands and the
conversation projection. Views are thin: validate, call one service or selector, serialise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from conversations.selectors import conversation_get
from core.api_base import EmptyInputSerializer, ListQuerySerializer, Pagination
from core.auth import principal_of
from core.permissions import Admin, AllowAnonymousReads, Authenticated
from core.renderers import HostJSONRenderer
from core.schema import error_responses
from extensions_host import selectors
from extensions_host.models import ExtensionStatus
from extensions_host.services.commands import CommandResult, Scope, command_call
from extensions_host.services.projection import projection_build
from extensions_host.services.roster import extension_resume

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": 256},
    OpenApiParameter.HEADER,
    required=False,
    description="A retry with the same key and body returns the stored result (1..256 chars).",
)
IDEMPOTENT_REPLAYED = OpenApiParameter(
    "Idempotent-Replayed",
    {"type": "string", "enum": ["true"]},
    OpenApiParameter.HEADER,
    response=[200],
    description="Sent (`true`) when this is the stored result of an earlier call with the same "
    "`Idempotency-Key`: the handler did not run again.",
)
COMMAND_ERRORS = error_responses(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)


class ExtensionSummarySerializer(serializers.Serializer):
    id = serializers.CharField()
    version = serializers.CharField()
    revision = serializers.CharField()
    status = serializers.ChoiceField(choices=ExtensionStatus.choices)
    reason = serializers.CharField(allow_blank=True)
    stopped_at = serializers.DateTimeField(allow_null=True)
    failing_hook = serializers.CharField(allow_blank=True)
    restart_count = serializers.IntegerField()


class GrantsSerializer(serializers.Serializer):
    requested = serializers.ListField(child=serializers.CharField())
    admitted = serializers.ListField(child=serializers.CharField())
    pending = serializers.ListField(child=serializers.CharField())


class UsageSerializer(serializers.Serializer):
    records = serializers.IntegerField()
    bytes = serializers.IntegerField()
    max_records = serializers.IntegerField()
    max_bytes = serializers.IntegerField()


class SettledSectionSerializer(serializers.Serializer):
    cursor = serializers.IntegerField(
        allow_null=True, help_text="The consumer's cursor (null before it is initialised)."
    )
    core_cursor = serializers.IntegerField(help_text="The highest committed settled sequence.")
    lag = serializers.IntegerField(allow_null=True, help_text="core_cursor − cursor.")


class TimersSectionSerializer(serializers.Serializer):
    pending = serializers.IntegerField(help_text="Timers set, due or not.")
    due = serializers.IntegerField(help_text="Timers due now (not fired yet).")
    oldest_due_age_ms = serializers.IntegerField(
        allow_null=True, help_text="How long the oldest due timer has been due."
    )
    max_timers = serializers.IntegerField(help_text="The extension's timer quota.")


class ExtensionDetailSerializer(ExtensionSummarySerializer):
    fingerprint = serializers.CharField()
    stop_event_id = serializers.CharField(allow_blank=True)
    last_error = serializers.CharField(allow_blank=True)
    next_auto_resume_at = serializers.DateTimeField(allow_null=True)
    auto_resume = serializers.BooleanField(
        help_text="Whether a stop is resumed automatically: the installed version declares it, "
        "staff did not turn it off, and HOST_AUTO_RESUME is on."
    )
    auto_resume_declared = serializers.BooleanField(
        help_text="What the installed version declares (`Extension(auto_resume=…)`)."
    )
    auto_resume_staff = serializers.BooleanField(
        help_text="Staff's switch (the admin): off keeps the extension stopped after a stop."
    )
    grants = GrantsSerializer()
    state_version = serializers.IntegerField(allow_null=True)
    installed = serializers.BooleanField()
    loaded_revision = serializers.CharField(allow_null=True)
    deadline_seconds = serializers.FloatField(allow_null=True)
    usage = UsageSerializer()
    settled = SettledSectionSerializer(
        allow_null=True, help_text="Settled-run delivery (null without the `settled` grant)."
    )
    timers = TimersSectionSerializer(
        allow_null=True, help_text="Timers (null without the `timers` grant)."
    )

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)
        # sections contributed by other capabilities (cursor, lag, timers due, …) pass through
        for key, value in instance.items():
            data.setdefault(key, value)
        return data


class ExtensionPageSerializer(serializers.Serializer):
    next = serializers.CharField(allow_null=True)
    previous = serializers.CharField(allow_null=True)
    results = ExtensionSummarySerializer(many=True)


class RosterPagination(Pagination):
    ordering = "id"


class ExtensionListApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema(
        operation_id="extensions_list",
        summary="The roster: every extension's status",
        parameters=[ListQuerySerializer],
        responses={200: ExtensionPageSerializer, **error_responses(400, 401)},
    )
    def get(self, request: Request) -> Response:
        paginator = RosterPagination()
        page = paginator.paginate(request, selectors.roster_entries(), view=self)
        rows = [selectors.extension_summary(row) for row in page]
        return paginator.get_paginated_response(ExtensionSummarySerializer(rows, many=True).data)


class ExtensionDetailApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema(
        operation_id="extensions_retrieve",
        summary="One extension: status, reason, grants, revision, restart data, usage",
        responses={200: ExtensionDetailSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, extension_id: str) -> Response:
        row = selectors.roster_entry_get(extension_id=extension_id)
        return Response(ExtensionDetailSerializer(selectors.extension_detail(row)).data)


class ExtensionResumeApi(APIView):
    permission_classes = [Admin]

    @extend_schema(
        operation_id="extensions_resume",
        summary="Resume a stopped extension (admin); a running one is returned as it is",
        request=EmptyInputSerializer,
        responses={
            200: ExtensionDetailSerializer,
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
    )
    def post(self, request: Request, extension_id: str) -> Response:
        # no body, or `{}`: any other JSON (`[]`, `null`, `0`, a field) is a 400
        EmptyInputSerializer(data=request.data).is_valid(raise_exception=True)
        actor = principal_of(request).user.get_username()
        row = extension_resume(extension_id=extension_id, actor=actor)
        return Response(ExtensionDetailSerializer(selectors.extension_detail(row)).data)


class CommandOutputRenderer(HostJSONRenderer):
    """JSON for every command output: DRF's renderer writes `None` as an empty body (and the
    response then loses its content type), a command's `None` is JSON `null` (spec 07: JSON in
    and out)."""

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        if data is None:
            return b"null"
        return super().render(data, accepted_media_type, renderer_context)


def _command_response(result: CommandResult) -> Response:
    response = Response(result.body, status=result.status)
    if result.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


class ExtensionCommandApi(APIView):
    """A global-scope extension command; the body is the command's input."""

    permission_classes = [Authenticated]
    renderer_classes = [CommandOutputRenderer]

    @extend_schema(
        operation_id="extensions_command",
        summary="Call a global extension command",
        parameters=[IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED],
        request=OpenApiTypes.OBJECT,
        responses={
            200: OpenApiResponse(OpenApiTypes.ANY, description="The command's output."),
            **COMMAND_ERRORS,
        },
    )
    def post(self, request: Request, extension_id: str, name: str) -> Response:
        return _command_response(_call(request, extension_id, name, "global", None))


class ConversationExtensionCommandApi(APIView):
    """A conversation-scope extension command; the body is the command's input."""

    permission_classes = [Authenticated]
    renderer_classes = [CommandOutputRenderer]

    @extend_schema(
        operation_id="conversations_extension_command",
        summary="Call an extension command in a conversation",
        parameters=[IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED],
        request=OpenApiTypes.OBJECT,
        responses={
            200: OpenApiResponse(OpenApiTypes.ANY, description="The command's output."),
            **COMMAND_ERRORS,
        },
    )
    def post(
        self, request: Request, conversation_id: str, extension_id: str, name: str
    ) -> Response:
        # access first (spec 01: 404, then 403): parsing the body can fail (400, 415)
        conversation_get(
            principal=principal_of(request), conversation_id=conversation_id, write=True
        )
        return _command_response(
            _call(request, extension_id, name, "conversation", conversation_id)
        )


def _call(
    request: Request, extension_id: str, name: str, scope: Scope, conversation_id: str | None
) -> CommandResult:
    return command_call(
        principal=principal_of(request),
        extension_id=extension_id,
        name=name,
        scope=scope,
        conversation_id=conversation_id,
        body=request.data,
        idempotency_key=request.headers.get("Idempotency-Key"),
    )


class ProjectionSlotSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["running", "stopped"])
    revision = serializers.CharField()
    value = serializers.JSONField(required=False, allow_null=True)
    catalog = serializers.ListField(child=serializers.DictField(), required=False)
    reason = serializers.CharField(required=False)


class ProjectionSerializer(serializers.Serializer):
    conversation_id = serializers.CharField()
    version = serializers.IntegerField()
    slots = serializers.DictField(child=ProjectionSlotSerializer())
    attention = serializers.ListField(child=serializers.DictField())


class ConversationProjectionApi(APIView):
    permission_classes = [AllowAnonymousReads]

    @extend_schema(
        operation_id="conversations_projection",
        summary="Projection slots of every extension with `projection` or `commands`",
        responses={200: ProjectionSerializer, **error_responses(401, 404, 503)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        # an anonymous caller who finds nothing gets 401, not 404: the exception handler's rule
        body = projection_build(principal=principal_of(request), conversation_id=conversation_id)
        return Response(body)
