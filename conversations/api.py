"""Conversation and run endpoints (spec 07). Views validate, call one service or selector, and
serialise; every rule lives in `conversations.services` and `conversations.selectors`.

Access (spec 01): conversation endpoints go through `conversation_get` (404 for what the
principal cannot read, before any other check; 403 for readable-but-not-writable); anonymous
callers get 401 except for reads of public conversations (on the views open to anonymous reads,
the exception handler turns their 404 into that 401: `core.errors`). Runtime endpoints need
the runtime principal and are not subject to sharing.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from conversations import selectors, services
from conversations.models import (
    Delivery,
    Outcome,
    Role,
    Run,
    Sharing,
    conversation_id_validator,
)
from conversations.serializers import (
    ConversationDetailSerializer,
    ConversationPagination,
    ConversationSerializer,
    EntryPagination,
    EntryPartSerializer,
    EntrySerializer,
    RunDetailSerializer,
    RunSerializer,
    SteersSerializer,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    SubmissionCreatedSerializer,
    SubmissionPartSerializer,
    SubmissionSerializer,
)
from conversations.services.submissions import WHEN_BUSY
from core.api_base import EmptyInputSerializer, ListQuerySerializer, StrictSerializer, paginated
from core.auth import principal_of
from core.db import BIGINT_MAX
from core.errors import HostError
from core.permissions import AllowAnonymousReads, Authenticated, Runtime
from core.schema import ErrorSerializer, error_responses

ConversationPage = paginated(ConversationSerializer, "ConversationPage")
EntryPage = paginated(EntrySerializer, "EntryPage")
NOTHING_TO_CLAIM = OpenApiResponse(description="Nothing is runnable right now.")


def _valid(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _detail(request: Request, conversation_id: str, code: int = 200) -> Response:
    conversation = selectors.conversation_view(
        principal=principal_of(request), conversation_id=conversation_id
    )
    # visible attention and ambient surfaces: running extensions granted `attention`
    from extensions_host.surfaces.selectors import ambient_visible, attention_visible

    conversation.attention = attention_visible(conversation_id=conversation.pk)
    conversation.ambient = ambient_visible(conversation_id=conversation.pk)
    return Response(ConversationDetailSerializer(conversation).data, status=code)


def _run_detail(request: Request, run: Run, code: int = 200) -> Response:
    run.input_list = selectors.run_inputs(run_id=run.pk)
    context = {"runtime": principal_of(request).is_runtime}
    return Response(RunDetailSerializer(run, context=context).data, status=code)


def _run_id(run_id: int) -> int:
    if run_id > BIGINT_MAX:
        raise HostError("store", "not_found", selectors.MSG_RUN_NOT_FOUND)
    return run_id


# ── conversations ────────────────────────────────────────────────────────────────────────────


class ConversationListCreateApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema_serializer(component_name="ConversationListQuery")
    class QuerySerializer(ListQuerySerializer):
        owner = StrictCharField(
            required=False, max_length=150, help_text='"me", a user id, or a username.'
        )
        archived = serializers.BooleanField(required=False, default=None)

    @extend_schema_serializer(component_name="ConversationCreateInput")
    class InputSerializer(StrictSerializer):
        id = StrictCharField(
            required=False,
            max_length=64,
            validators=[conversation_id_validator],
            help_text="Client-chosen id; generated (unguessable) when absent.",
        )
        name = StrictCharField(required=False, max_length=200, allow_blank=True, default="")
        sharing = serializers.ChoiceField(choices=Sharing.choices, default=Sharing.PRIVATE)
        source = StrictCharField(required=False, max_length=64, allow_blank=True, default="")  # type: ignore[assignment]  # field name

    @extend_schema(
        operation_id="conversations_list",
        summary="List visible conversations, newest activity first",
        parameters=[QuerySerializer],
        responses={200: ConversationPage, **error_responses(400, 401)},
    )
    def get(self, request: Request) -> Response:
        paginator = ConversationPagination()
        query = paginator.query(request, self.QuerySerializer)
        conversations = selectors.conversations_list(
            principal=principal_of(request),
            owner=query.get("owner"),
            archived=query.get("archived"),
        )
        page = paginator.paginate(request, conversations, view=self)
        return paginator.get_paginated_response(ConversationSerializer(page, many=True).data)

    @extend_schema(
        operation_id="conversations_create",
        summary="Create a conversation (idempotent on a client-chosen id)",
        request=InputSerializer,
        responses={
            201: ConversationDetailSerializer,
            200: OpenApiResponse(
                ConversationDetailSerializer, description="It exists already and is yours."
            ),
            **error_responses(400, 401, 403, 409, 413, 415),
        },
    )
    def post(self, request: Request) -> Response:
        data = _valid(self.InputSerializer, request.data)
        created = services.conversation_create(
            principal=principal_of(request),
            conversation_id=data.get("id"),
            name=data["name"],
            sharing=data["sharing"],
            source=data["source"],
        )
        return _detail(request, created.conversation.pk, 201 if created.created else 200)


class ConversationDetailApi(APIView):
    permission_classes = [AllowAnonymousReads]

    @extend_schema_serializer(component_name="ConversationUpdateInput")
    class InputSerializer(StrictSerializer):
        name = StrictCharField(required=False, max_length=200, allow_blank=True)
        sharing = serializers.ChoiceField(choices=Sharing.choices, required=False)
        archived = StrictBooleanField(required=False)

    @extend_schema(
        operation_id="conversations_retrieve",
        summary="View a conversation (with visible attention and ambient surfaces)",
        responses={200: ConversationDetailSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        return _detail(request, conversation_id)

    @extend_schema(
        operation_id="conversations_update",
        summary="Rename, share, archive or unarchive",
        request=InputSerializer,
        responses={
            200: ConversationDetailSerializer,
            **error_responses(400, 401, 403, 404, 413, 415),
        },
    )
    def patch(self, request: Request, conversation_id: str) -> Response:
        principal = principal_of(request)
        selectors.conversation_get(principal=principal, conversation_id=conversation_id, write=True)
        data = _valid(self.InputSerializer, request.data)
        services.conversation_update(principal=principal, conversation_id=conversation_id, **data)
        return _detail(request, conversation_id)


class ConversationForkApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema_serializer(component_name="ConversationForkInput")
    class InputSerializer(StrictSerializer):
        at = StrictIntegerField(help_text="The parent's entry to fork at (included).")
        id = StrictCharField(
            required=False,
            max_length=64,
            validators=[conversation_id_validator],
            help_text="Client-chosen id of the fork.",
        )
        name = StrictCharField(required=False, max_length=200, allow_blank=True)

    @extend_schema(
        operation_id="conversations_fork",
        summary="Fork: a new conversation with a copy of the transcript up to an entry",
        request=InputSerializer,
        responses={
            201: ConversationDetailSerializer,
            200: OpenApiResponse(
                ConversationDetailSerializer, description="The same fork exists already."
            ),
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        principal = principal_of(request)
        selectors.conversation_get(principal=principal, conversation_id=conversation_id, write=True)
        data = _valid(self.InputSerializer, request.data)
        created = services.conversation_fork(
            principal=principal,
            conversation_id=conversation_id,
            at=data["at"],
            child_id=data.get("id"),
            name=data.get("name"),
        )
        return _detail(request, created.conversation.pk, 201 if created.created else 200)


class ConversationEntriesApi(APIView):
    """GET: the transcript for readers. POST: the runtime appends to its claimed run."""

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method == "POST":
            return [Runtime()]
        return [AllowAnonymousReads()]

    @extend_schema_serializer(component_name="EntryAppendInput")
    class InputSerializer(StrictSerializer):
        run_id = StrictIntegerField()
        entry_key = StrictCharField(
            required=False,
            allow_null=True,
            max_length=128,
            help_text="Idempotency key within the run.",
        )
        role = serializers.ChoiceField(choices=[Role.ASSISTANT, Role.TOOL, Role.SYSTEM])
        content = serializers.ListField(child=EntryPartSerializer(), min_length=1, max_length=256)

    @extend_schema(
        operation_id="conversation_entries_list",
        summary="Transcript page (oldest first)",
        parameters=[ListQuerySerializer],
        responses={200: EntryPage, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = selectors.conversation_get(
            principal=principal_of(request), conversation_id=conversation_id
        )
        paginator = EntryPagination()
        page = paginator.paginate(
            request, selectors.entries_of(conversation_id=conversation.pk), view=self
        )
        return paginator.get_paginated_response(EntrySerializer(page, many=True).data)

    @extend_schema(
        operation_id="conversation_entries_append",
        summary="Append an entry to a claimed run (runtime; idempotent on entry_key)",
        request=InputSerializer,
        responses={
            201: EntrySerializer,
            200: OpenApiResponse(EntrySerializer, description="Existing entry (retry)."),
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        data = _valid(self.InputSerializer, request.data)
        appended = services.entry_append(conversation_id=conversation_id, **data)
        code = status.HTTP_201_CREATED if appended.created else status.HTTP_200_OK
        return Response(EntrySerializer(appended.entry).data, status=code)


class SubmissionCreateApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema_serializer(component_name="SubmissionCreateInput")
    class InputSerializer(StrictSerializer):
        request_id = StrictCharField(
            required=False,
            min_length=1,
            max_length=128,
            help_text="Idempotency key (generated when absent).",
        )
        parts = serializers.ListField(
            child=SubmissionPartSerializer(),
            min_length=1,
            max_length=256,
            help_text="Text ≤ 64 KiB in total.",
        )
        when_busy = serializers.ChoiceField(choices=list(WHEN_BUSY), default="queue")
        delivery = serializers.ChoiceField(choices=Delivery.choices, default=Delivery.FOLLOW_UP)
        not_before = serializers.DateTimeField(required=False, allow_null=True, default=None)

    @extend_schema(
        operation_id="submissions_create",
        summary="Submit a prompt (idempotent on request_id)",
        request=InputSerializer,
        responses={
            201: SubmissionCreatedSerializer,
            200: OpenApiResponse(
                SubmissionCreatedSerializer, description="Idempotent retry: the existing one."
            ),
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        principal = principal_of(request)
        selectors.conversation_get(principal=principal, conversation_id=conversation_id, write=True)
        data = _valid(self.InputSerializer, request.data)
        admission = services.submission_submit(
            principal=principal, conversation_id=conversation_id, **data
        )
        body = SubmissionSerializer(admission.submission).data | {
            "idempotent": not admission.created
        }
        return Response(body, status=201 if admission.created else 200)


class SubmissionWithdrawApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema(
        operation_id="submissions_withdraw",
        summary="Withdraw a queued submission",
        responses={
            200: SubmissionSerializer,
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
    )
    def delete(self, request: Request, conversation_id: str, submission_id: int) -> Response:
        submission = services.submission_withdraw(
            principal=principal_of(request),
            conversation_id=conversation_id,
            submission_id=submission_id,
            # once access is granted: the body may be empty, never carry fields
            after_access=lambda: _valid(EmptyInputSerializer, request.data),
        )
        return Response(SubmissionSerializer(submission).data)


# ── runs (runtime) ───────────────────────────────────────────────────────────────────────────


@extend_schema_serializer(component_name="RunClaimInput")
class ClaimInputSerializer(StrictSerializer):
    claim_key = StrictCharField(
        required=False,
        allow_null=True,
        max_length=128,
        help_text="A retry with the same key returns the same run.",
    )


CLAIM_RESPONSES = {
    201: RunDetailSerializer,
    200: OpenApiResponse(RunDetailSerializer, description="Retry of a claim_key: the same run."),
    204: NOTHING_TO_CLAIM,
    503: OpenApiResponse(
        ErrorSerializer,
        description="unavailable: a claim-time participation hook asked to retry (the run is "
        "released, its inputs re-queued), an earlier attempt with this claim_key is still "
        "capturing, or the store is unavailable; claim again after Retry-After.",
    ),
}


class ConversationRunClaimApi(APIView):
    permission_classes = [Runtime]

    @extend_schema(
        operation_id="conversation_runs_claim",
        summary="Claim the runnable submissions of this conversation (runtime)",
        request=ClaimInputSerializer,
        responses={**CLAIM_RESPONSES, **error_responses(400, 401, 403, 404, 409, 413, 415, 422)},
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        data = _valid(ClaimInputSerializer, request.data)
        claim = services.run_claim(conversation_id=conversation_id, claim_key=data.get("claim_key"))
        if claim is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return _run_detail(request, claim.run, 201 if claim.created else 200)


class RunClaimApi(APIView):
    permission_classes = [Runtime]

    @extend_schema(
        operation_id="runs_claim",
        summary="Claim work in any conversation (runtime; SKIP LOCKED, oldest work first)",
        request=ClaimInputSerializer,
        responses={**CLAIM_RESPONSES, **error_responses(400, 401, 403, 409, 413, 415, 422)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(ClaimInputSerializer, request.data)
        claim = services.run_claim(claim_key=data.get("claim_key"))
        if claim is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return _run_detail(request, claim.run, 201 if claim.created else 200)


class RunDetailApi(APIView):
    permission_classes = [AllowAnonymousReads]

    @extend_schema(
        operation_id="runs_retrieve",
        summary="A run with its inputs, outcome and settled sequence",
        responses={200: RunDetailSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = selectors.run_get(principal=principal_of(request), run_id=run_id)
        return _run_detail(request, run)


class RunHeartbeatApi(APIView):
    permission_classes = [Runtime]

    @extend_schema(
        operation_id="runs_heartbeat",
        summary="Extend the run's lease by RUN_LEASE_SECONDS (runtime)",
        request=EmptyInputSerializer,
        responses={200: RunSerializer, **error_responses(400, 401, 403, 404, 409, 413, 415)},
    )
    def post(self, request: Request, run_id: int) -> Response:
        _valid(EmptyInputSerializer, request.data)
        run = services.run_heartbeat(run_id=_run_id(run_id))
        return Response(RunSerializer(run).data)


class RunSettleApi(APIView):
    permission_classes = [Runtime]

    @extend_schema_serializer(component_name="RunSettleInput")
    class InputSerializer(StrictSerializer):
        status = serializers.ChoiceField(choices=Outcome.choices)
        answer_entry_id = StrictIntegerField(required=False, help_text="Required when answered.")
        reason = StrictCharField(
            required=False, max_length=512, help_text="Required when unanswered."
        )

    @extend_schema(
        operation_id="runs_settle",
        summary="Settle the run (runtime; idempotent: same outcome → 200, different → 409)",
        request=InputSerializer,
        responses={200: RunSerializer, **error_responses(400, 401, 403, 404, 409, 413, 415)},
    )
    def post(self, request: Request, run_id: int) -> Response:
        data = _valid(self.InputSerializer, request.data)
        settled = services.run_settle(run_id=_run_id(run_id), **data)
        return Response(RunSerializer(settled.run).data)


class RunSteersApi(APIView):
    permission_classes = [Runtime]

    @extend_schema(
        operation_id="runs_steers",
        summary="Take pending steer submissions into the live run, in order (runtime)",
        request=EmptyInputSerializer,
        responses={200: SteersSerializer, **error_responses(400, 401, 403, 404, 409, 413, 415)},
    )
    def post(self, request: Request, run_id: int) -> Response:
        _valid(EmptyInputSerializer, request.data)
        steers = services.run_steers_take(run_id=_run_id(run_id))
        return Response(SteersSerializer({"submissions": steers}).data)
