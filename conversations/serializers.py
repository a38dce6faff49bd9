"""Wire shapes shared by the conversation endpoints: strict input fields, content parts, and
the output serializers (snake_case everywhere). Views nest their own InputSerializers."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from conversations.models import (
    Delivery,
    OriginKind,
    Outcome,
    Role,
    RunStatus,
    Sharing,
    SubmissionStatus,
)
from conversations.services.common import PART_TYPES_ENTRY, PART_TYPES_SUBMISSION
from core.api_base import IdPagination, KeysetPagination, StrictSerializer
from core.db import BIGINT_MAX

# ── strict scalar fields: JSON types are not coerced ("1" is not 1, "yes" is not true) ─────────


class StrictCharField(serializers.CharField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)  # ids and keys are taken as sent
        super().__init__(**kwargs)

    default_error_messages = {
        **serializers.CharField.default_error_messages,
        "unicode": "Text must be valid Unicode.",
    }

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        try:
            data.encode("utf-8")  # a lone surrogate would be a driver error at insert time
        except UnicodeEncodeError:
            self.fail("unicode")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictIntegerField(serializers.IntegerField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", BIGINT_MAX)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


# ── content parts ────────────────────────────────────────────────────────────────────────────


@extend_schema_serializer(component_name="SubmissionPart")
class SubmissionPartSerializer(StrictSerializer):
    """`text` parts carry `text`; `image`/`file` parts reference content by `url` or `path`
    (the host stores no binary content)."""

    type = serializers.ChoiceField(choices=sorted(PART_TYPES_SUBMISSION))
    text = StrictCharField(required=False, allow_blank=True, trim_whitespace=False)
    url = StrictCharField(required=False, max_length=2048)
    path = StrictCharField(required=False, max_length=2048)
    name = StrictCharField(required=False, max_length=256)
    mime_type = StrictCharField(required=False, max_length=128)
    meta = serializers.DictField(required=False)


@extend_schema_serializer(component_name="EntryPart")
class EntryPartSerializer(SubmissionPartSerializer):
    """Entry content parts: the submission part types plus `tool_call` (`id`, `name`,
    `arguments`) and `tool_result` (`tool_call_id`, `ok`, `content`)."""

    type = serializers.ChoiceField(choices=sorted(PART_TYPES_ENTRY))
    id = StrictCharField(required=False, max_length=128)
    name = StrictCharField(required=False, max_length=256)
    arguments = serializers.DictField(required=False)
    tool_call_id = StrictCharField(required=False, max_length=128)
    ok = StrictBooleanField(required=False)
    content = serializers.JSONField(required=False)


# ── outputs ──────────────────────────────────────────────────────────────────────────────────


class OwnerSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


class ConversationSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    source = serializers.CharField()  # type: ignore[assignment]  # field name
    sharing = serializers.ChoiceField(choices=Sharing.choices)
    archived = serializers.BooleanField()
    archived_at = serializers.DateTimeField(allow_null=True)
    owner = OwnerSerializer()
    parent_id = serializers.CharField(allow_null=True)
    forked_at_entry = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    last_activity_at = serializers.DateTimeField()
    version = serializers.IntegerField()
    head = serializers.IntegerField(allow_null=True, help_text="Newest entry id.")
    busy = serializers.BooleanField(help_text="A run is claimed and not settled.")


class ConversationDetailSerializer(ConversationSerializer):
    access = serializers.ChoiceField(choices=["owner", "read"])
    attention = serializers.ListField(
        child=serializers.DictField(), help_text="Visible attention items."
    )
    ambient = serializers.ListField(
        child=serializers.DictField(), help_text="Visible ambient surfaces."
    )


class EntrySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    conversation_id = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)
    content = serializers.ListField(child=serializers.DictField())
    run_id = serializers.IntegerField(allow_null=True)
    submission_id = serializers.IntegerField(allow_null=True)
    entry_key = serializers.CharField(allow_null=True)
    withdrawn = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class OriginSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=OriginKind.choices)
    user = serializers.IntegerField(allow_null=True)
    extension_id = serializers.CharField(allow_null=True)
    correlation = serializers.CharField(allow_null=True)


class SubmissionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    conversation_id = serializers.CharField()
    request_id = serializers.CharField()
    parts = serializers.ListField(child=serializers.DictField())
    delivery = serializers.ChoiceField(choices=Delivery.choices)
    not_before = serializers.DateTimeField(allow_null=True)
    origin = serializers.SerializerMethodField()
    status = serializers.ChoiceField(choices=SubmissionStatus.choices)
    entry_id = serializers.IntegerField(source="entry.id", allow_null=True)
    run_id = serializers.IntegerField(allow_null=True)
    release_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()

    @extend_schema_field(OriginSerializer)
    def get_origin(self, submission: Any) -> dict[str, Any]:
        user = submission.origin_kind == OriginKind.USER
        return {
            "kind": submission.origin_kind,
            "user": submission.origin_user_id if user else None,
            "extension_id": None if user else submission.origin_extension_id,
            # the column keeps "" for "no correlation"; the wire says null (as the seed does)
            "correlation": None if user else submission.correlation or None,
        }


class SubmissionCreatedSerializer(SubmissionSerializer):
    idempotent = serializers.BooleanField(help_text="True: a retry returned the existing one.")


class OutcomeSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=Outcome.choices)
    answer_entry_id = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField(allow_null=True)


class PromptSectionSerializer(serializers.Serializer):
    name = serializers.CharField()
    text = serializers.CharField()


class CaptureSerializer(serializers.Serializer):
    participants = serializers.ListField(child=serializers.DictField())
    prompt_sections = PromptSectionSerializer(many=True)
    tool_modules = serializers.ListField(child=serializers.DictField())
    skills = serializers.ListField(child=serializers.DictField())
    files = serializers.ListField(child=serializers.DictField())
    compaction_handoff = serializers.DictField(allow_null=True)


class RunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    conversation_id = serializers.CharField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    claim_key = serializers.CharField(allow_null=True)
    claimed_at = serializers.DateTimeField()
    lease_expires_at = serializers.DateTimeField()
    heartbeat_at = serializers.DateTimeField(allow_null=True)
    settled_at = serializers.DateTimeField(allow_null=True)
    settled_sequence = serializers.IntegerField(allow_null=True)
    outcome = serializers.SerializerMethodField()

    @extend_schema_field(OutcomeSerializer(allow_null=True))
    def get_outcome(self, run: Any) -> dict[str, Any] | None:
        if run.status != RunStatus.SETTLED:
            return None
        answered = run.outcome == Outcome.ANSWERED
        return {
            "status": run.outcome,
            "answer_entry_id": run.answer_entry_id if answered else None,
            "reason": None if answered else run.reason,
        }


class RunDetailSerializer(RunSerializer):
    """A run with its inputs and (for the runtime) what its claim captured."""

    inputs = SubmissionSerializer(many=True, source="input_list")
    capture = serializers.SerializerMethodField()

    @extend_schema_field(CaptureSerializer(allow_null=True))
    def get_capture(self, run: Any) -> dict[str, Any] | None:
        if not self.context.get("runtime"):
            return None  # prompt sections and tool modules are for the runtime
        return CaptureSerializer(run.capture or {}).data if run.capture else None


class SteersSerializer(serializers.Serializer):
    submissions = SubmissionSerializer(many=True)


class ConversationPagination(KeysetPagination):
    # matches conv_activity_idx (last_activity_at DESC, id ASC). Activity instants tie (a
    # millisecond clock, conversations created together): the id breaks ties, and the cursor
    # carries both (`KeysetPagination`)
    ordering = ("-last_activity_at", "id")

    def position_valid(self, position: str) -> bool:
        """An aware datetime that stays in range in UTC. Every issued position is one (a UTC
        `last_activity_at`); a forged one may be naive (no instant at all) or overflow only
        when the query converts it to UTC (`9999-12-31 23:59:59-05:00`), a 500 on SQLite and
        a silently accepted cursor on PostgreSQL. `astimezone` raises that OverflowError here,
        where `decode_cursor` turns it into 400 `Cursor is invalid`."""
        if "\x00" in position:
            return False
        value = parse_datetime(position)
        if value is None or value.tzinfo is None or value.utcoffset() is None:
            return False
        value.astimezone(dt.UTC)
        return True


class EntryPagination(IdPagination):
    # entry_conv_idx (conversation, id): transcripts read oldest first
    ordering = ("id",)
