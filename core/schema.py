"""OpenAPI helpers: the error body component and per-status error responses."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from core.errors import STATUS_BY_CAUSE


class ErrorDetailSerializer(serializers.Serializer):
    category = serializers.ChoiceField(
        choices=["contract", "store", "runtime", "extensions", "auth", "limit"]
    )
    cause = serializers.ChoiceField(choices=sorted(STATUS_BY_CAUSE))
    message = serializers.CharField()
    details = serializers.DictField(required=False)


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


_DESCRIPTIONS = {
    400: "invalid input", 401: "unauthenticated", 403: "forbidden", 404: "not found",
    405: "method not allowed", 409: "conflict or closed", 413: "body too large",
    415: "unsupported media type", 422: "rejected", 429: "throttled",
    503: "unavailable",
}


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """`{status: OpenApiResponse(ErrorSerializer)}` for each status a view can answer."""
    return {
        code: OpenApiResponse(response=ErrorSerializer, description=_DESCRIPTIONS.get(code, ""))
        for code in statuses
    }
