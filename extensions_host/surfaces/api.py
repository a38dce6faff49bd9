"""Endpoints of the conversation capabilities (spec 04, 07): tool calls (runtime), interactions
(list, answer). The event stream is the async view in `events.py`. Views are thin."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from conversations.selectors import conversation_get
from core.api_base import IdPagination, StrictSerializer
from core.auth import principal_of
from core.db import BIGINT_MAX
from core.errors import HostError
from core.permissions import AllowAnonymousReads, Authenticated, Runtime
from core.schema import error_responses
from extensions_host.surfaces.models import InteractionStatus, ToolCallResult
from extensions_host.surfaces.selectors import interactions_of
from extensions_host.surfaces.services.interactions import (
    interaction_answer_by_user,
    interaction_wire,
)
from extensions_host.surfaces.services.toolcalls import tool_call_execute


class ToolCallResultSerializer(serializers.Serializer):
    tool_call_id = serializers.CharField()
    extension = serializers.CharField(source="extension_id")
    tool = serializers.CharField()
    ok = serializers.BooleanField()
    result = serializers.JSONField(allow_null=True, help_text="The handler's result (ok only).")
    reason = serializers.CharField(allow_blank=True, help_text="Why it failed (ok: false).")
    entry_id = serializers.IntegerField(allow_null=True, help_text="The tool_result entry.")
    idempotent = serializers.BooleanField(help_text="The recorded result of an earlier call.")


class RunToolCallApi(APIView):
    """Execute a tool of an extension captured by the run (runtime)."""

    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="ToolCallInput")
    class InputSerializer(StrictSerializer):
        tool_call_id = serializers.CharField(max_length=128, trim_whitespace=False)
        extension = serializers.CharField(max_length=64, trim_whitespace=False)
        tool = serializers.CharField(max_length=64, trim_whitespace=False)
        arguments = serializers.DictField(required=False, default=dict)

    @extend_schema(
        operation_id="runs_tool_calls",
        summary="Execute an extension tool call (runtime; idempotent on tool_call_id)",
        request=InputSerializer,
        responses={
            200: ToolCallResultSerializer,
            201: ToolCallResultSerializer,
            **error_responses(400, 401, 403, 404, 409, 413, 415, 503),
        },
    )
    def post(self, request: Request, run_id: int) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if run_id > BIGINT_MAX:
            raise HostError("store", "not_found", "Run not found")
        outcome = tool_call_execute(
            run_id=run_id,
            tool_call_id=data["tool_call_id"],
            extension_id=data["extension"],
            tool=data["tool"],
            arguments=data["arguments"],
        )
        return Response(
            _tool_call(outcome.record, idempotent=not outcome.created),
            status=201 if outcome.created else 200,
        )


def _tool_call(record: ToolCallResult, *, idempotent: bool) -> dict[str, Any]:
    record.idempotent = idempotent  # type: ignore[attr-defined]
    return dict(ToolCallResultSerializer(record).data)


class InteractionSerializer(serializers.Serializer):
    call_id = serializers.CharField()
    extension = serializers.CharField()
    kind = serializers.CharField()
    prompt = serializers.CharField()
    options = serializers.ListField(child=serializers.CharField(), allow_null=True)
    status = serializers.ChoiceField(choices=InteractionStatus.choices)
    answer = serializers.JSONField(allow_null=True)
    created_at = serializers.IntegerField(help_text="Epoch milliseconds.")
    settled_at = serializers.IntegerField(allow_null=True, help_text="Epoch milliseconds.")


class InteractionPageSerializer(serializers.Serializer):
    next = serializers.CharField(allow_null=True)
    previous = serializers.CharField(allow_null=True)
    results = InteractionSerializer(many=True)


class InteractionPagination(IdPagination):
    ordering = "id"


class ConversationInteractionListApi(APIView):
    permission_classes = [AllowAnonymousReads]

    class QuerySerializer(StrictSerializer):
        status = serializers.ChoiceField(choices=InteractionStatus.choices, required=False)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=100)
        cursor = serializers.CharField(required=False, max_length=512)

    @extend_schema(
        operation_id="conversations_interactions_list",
        summary="The conversation's interactions, oldest first",
        parameters=[QuerySerializer],
        responses={200: InteractionPageSerializer, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        # an anonymous caller who finds nothing gets 401, not 404: the exception handler's rule
        conversation_get(principal=principal_of(request), conversation_id=conversation_id)
        # the query is checked only once the caller may read (spec 01: 401/404 come first)
        paginator = InteractionPagination()
        query = paginator.query(request, self.QuerySerializer)
        rows = interactions_of(conversation_id=conversation_id, status=query.get("status"))
        page = paginator.paginate(request, rows, view=self)
        return paginator.get_paginated_response(
            InteractionSerializer([interaction_wire(row) for row in page], many=True).data
        )


class InteractionAnswerResultSerializer(serializers.Serializer):
    answered = serializers.BooleanField(help_text="False: it was no longer pending.")
    interaction = InteractionSerializer()


class ConversationInteractionAnswerApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema_serializer(component_name="InteractionAnswerInput")
    class InputSerializer(StrictSerializer):
        answer = serializers.JSONField()

    @extend_schema(
        operation_id="conversations_interactions_answer",
        summary="Answer a pending interaction (owner access)",
        request=InputSerializer,
        responses={
            200: InteractionAnswerResultSerializer,
            **error_responses(400, 401, 403, 404, 413, 415),
        },
    )
    def post(self, request: Request, conversation_id: str, call_id: str) -> Response:
        principal = principal_of(request)
        # access first (spec 01: 404, then 403), and only then the body
        conversation_get(principal=principal, conversation_id=conversation_id, write=True)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        answered, record = interaction_answer_by_user(
            principal=principal,
            conversation_id=conversation_id,
            call_id=call_id,
            answer=serializer.validated_data["answer"],
        )
        return Response(
            InteractionAnswerResultSerializer(
                {"answered": answered, "interaction": interaction_wire(record)}
            ).data
        )
