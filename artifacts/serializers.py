"""Serializers of the artifact store's HTTP API: strict inputs (the schema's request bodies)
and the outputs (the schema's response bodies)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from artifacts.choices import (
    ID_MAX,
    NAME_MAX,
    ContentType,
    FollowupStatus,
    Invalidation,
    OperationStatus,
    ProjectionStatus,
    Save,
    Strategy,
)
from artifacts.types import (
    MAX_ARTIFACT_BYTES_LIMIT,
    MAX_DECLARATIONS,
    MAX_EMITS_LIMIT,
    FollowupSummary,
)
from core.api_base import StrictSerializer

# --- fields ------------------------------------------------------------------------------------


class StrictCharField(serializers.CharField):
    """A string field that takes only JSON strings (no number coercion: ids compare exactly)
    and keeps them as sent (no trimming)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


def status_field(choices: list[tuple[str, str]] | list[str], **kwargs: Any) -> Any:
    """A ChoiceField whose enum is inlined in the schema: several of this API's fields are
    called `status` over different choice sets, which named enum components would collide on."""
    values = [c[0] if isinstance(c, tuple) else c for c in choices]
    field_class = extend_schema_field({"type": "string", "enum": values})(
        type("StatusChoiceField", (serializers.ChoiceField,), {})
    )
    return field_class(choices=choices, **kwargs)


def id_field(**kwargs: Any) -> StrictCharField:
    kwargs.setdefault("max_length", ID_MAX)
    return StrictCharField(**kwargs)


# --- input serializers -------------------------------------------------------------------------


class ContextSerializer(StrictSerializer):
    world_id = id_field(max_length=64, help_text="The conversation the artifacts belong to.")
    parent_head = id_field(help_text="The conversation's newest entry id when the operation began.")
    operation_id = id_field()
    preset_id = id_field()
    preset_revision = id_field()
    preset_scripts_enabled = StrictBooleanField()


class DeclarationSerializer(StrictSerializer):
    name = id_field(max_length=NAME_MAX)
    channel = id_field(max_length=NAME_MAX)
    key = id_field(max_length=NAME_MAX, required=False, help_text="Required for upsert, only then.")
    content_type = serializers.ChoiceField(choices=ContentType.choices)
    renderer = id_field(max_length=NAME_MAX, required=False)
    renderer_revision = id_field(max_length=NAME_MAX, required=False)
    save = serializers.ChoiceField(choices=Save.choices)  # type: ignore[assignment]  # field name
    strategy = serializers.ChoiceField(choices=Strategy.choices)
    invalidation = serializers.ChoiceField(choices=Invalidation.choices)
    max_emits = StrictIntegerField(min_value=1, max_value=MAX_EMITS_LIMIT)
    payload_contract = serializers.DictField(
        required=False, help_text="A JSON Schema the JSON payload must satisfy."
    )


class RequestContextSerializer(ContextSerializer):
    request_id = id_field()
    request_attempt = StrictIntegerField(min_value=1, max_value=2**31 - 1)
    max_artifact_bytes = StrictIntegerField(min_value=0, max_value=MAX_ARTIFACT_BYTES_LIMIT)
    declarations = serializers.ListField(child=DeclarationSerializer(), max_length=MAX_DECLARATIONS)


# --- output serializers ------------------------------------------------------------------------


class OperationOutputSerializer(serializers.Serializer):
    world_id = serializers.CharField()
    parent_head = serializers.CharField()
    operation_id = serializers.CharField()
    preset_id = serializers.CharField()
    preset_revision = serializers.CharField()
    preset_scripts_enabled = serializers.BooleanField()
    status = status_field(OperationStatus.choices)
    followup_status = serializers.ChoiceField(choices=FollowupStatus.choices)
    projection_status = serializers.ChoiceField(choices=ProjectionStatus.choices)
    head = serializers.CharField(allow_null=True)
    message = serializers.CharField(allow_null=True)
    completed_requests = serializers.ListField(child=serializers.CharField())
    request_attempts = serializers.DictField(child=serializers.IntegerField())


class FollowupSummarySerializer(serializers.Serializer):
    operation_id = serializers.CharField()
    status = status_field(FollowupStatus.choices)
    completed_requests = serializers.ListField(child=serializers.CharField())
    core_committed = serializers.BooleanField()
    message = serializers.CharField(allow_null=True)
    head = serializers.CharField(allow_null=True)


class EmitOutputSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    idempotent = serializers.BooleanField(required=False, help_text="Only when ok.")
    record_id = serializers.CharField(required=False, help_text="Only when ok.")
    markdown = serializers.CharField(help_text="The tool result for the model.")


class ClearOutputSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    idempotent = serializers.BooleanField(required=False, help_text="Only when ok.")
    markdown = serializers.CharField(help_text="The tool result for the model.")


class AttemptOutputSerializer(serializers.Serializer):
    operation_id = serializers.CharField()
    request_id = serializers.CharField()
    request_attempt = serializers.IntegerField()
    current_attempt = serializers.IntegerField(allow_null=True)
    recorded = serializers.BooleanField(help_text="False: ignored (stale or finished).")
    superseded_records = serializers.IntegerField()


class ReconcileOutputSerializer(serializers.Serializer):
    world_id = serializers.CharField()
    head = serializers.CharField()
    superseded_records = serializers.ListField(child=serializers.CharField())
    superseded_operations = serializers.ListField(child=serializers.CharField())


class ProjectionItemSerializer(serializers.Serializer):
    record_id = serializers.CharField()
    world_id = serializers.CharField()
    operation_id = serializers.CharField()
    preset_id = serializers.CharField()
    preset_revision = serializers.CharField()
    preset_scripts_enabled = serializers.BooleanField()
    request_id = serializers.CharField()
    request_attempt = serializers.IntegerField()
    output = serializers.CharField()
    channel = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    content_type = serializers.ChoiceField(choices=ContentType.choices)
    renderer = serializers.CharField(allow_null=True)
    renderer_revision = serializers.CharField(allow_null=True)
    payload = serializers.JSONField(help_text="A string, or any JSON value for JSON outputs.")
    strategy = serializers.ChoiceField(choices=Strategy.choices)
    save = serializers.ChoiceField(choices=Save.choices)  # type: ignore[assignment]  # field name
    sequence = serializers.IntegerField()
    head = serializers.CharField()


class ProjectionOutputSerializer(serializers.Serializer):
    world_id = serializers.CharField()
    items = ProjectionItemSerializer(many=True)


class DebugRecordSerializer(serializers.Serializer):
    record_id = serializers.CharField()
    sequence = serializers.IntegerField()
    operation_id = serializers.CharField()
    world_id = serializers.CharField()
    preset_id = serializers.CharField()
    preset_revision = serializers.CharField()
    preset_scripts_enabled = serializers.BooleanField()
    parent_head = serializers.CharField()
    new_head = serializers.CharField(allow_null=True)
    request_id = serializers.CharField()
    request_attempt = serializers.IntegerField()
    output = serializers.CharField()
    channel = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    content_type = serializers.ChoiceField(choices=ContentType.choices)
    renderer = serializers.CharField(allow_null=True)
    renderer_revision = serializers.CharField(allow_null=True)
    save = serializers.ChoiceField(choices=Save.choices)  # type: ignore[assignment]  # field name
    strategy = serializers.ChoiceField(choices=Strategy.choices)
    invalidation = serializers.ChoiceField(choices=Invalidation.choices)
    tool_call_id = serializers.CharField()
    payload_bytes = serializers.IntegerField()
    payload = serializers.JSONField(allow_null=True)
    payload_available = serializers.BooleanField(help_text="False: an evicted save=none payload.")
    payload_undecodable = serializers.BooleanField(
        help_text="True: the stored payload does not decode (corruption); `payload` is null."
    )
    payload_raw = serializers.CharField(
        allow_null=True,
        help_text="The start (2,000 characters) of an undecodable payload's text, else null.",
    )
    payload_fingerprint = serializers.CharField()
    status = status_field(["pending", "active", "superseded", "cleared"])


class DebugOutputSerializer(serializers.Serializer):
    """A page of records, newest first, and the operations they belong to."""

    world_id = serializers.CharField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = DebugRecordSerializer(many=True)
    operations = OperationOutputSerializer(many=True)


def summary_data(summary: FollowupSummary) -> dict[str, Any]:
    return {
        "operation_id": summary.operation_id,
        "status": summary.status,
        "completed_requests": list(summary.completed_requests),
        "core_committed": summary.core_committed,
        "message": summary.message,
        "head": summary.head,
    }
