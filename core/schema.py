"""OpenAPI helpers: the error body component and per-status error responses."""

from __future__ import annotations

from typing import Any, Literal

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
    400: "invalid input",
    401: "unauthenticated",
    403: "forbidden",
    404: "not found",
    405: "method not allowed",
    406: "not acceptable: the Accept header allows no JSON response",
    409: "conflict or closed",
    413: "body too large",
    415: "unsupported media type",
    422: "rejected",
    429: "throttled",
    503: "unavailable",
}


# What the error responses carry besides the body (spec 07), set by `core.errors.error_response`.
RESPONSE_HEADERS = {
    "401": {
        "WWW-Authenticate": {
            "description": 'The scheme to authenticate with: `Bearer realm="hyphae"`.',
            "schema": {"type": "string"},
        }
    },
    **{
        code: {
            "Retry-After": {
                "description": "Whole seconds to wait before retrying.",
                "schema": {"type": "integer", "minimum": 1},
            }
        }
        for code in ("429", "503")
    },
}


def document_response_headers(result: dict[str, Any]) -> dict[str, Any]:
    """Post-processing: every documented 401 names `WWW-Authenticate`, every 429 and 503
    `Retry-After` (a 503 sends it when a retry can help: a `Retry`, the store; a stopped
    extension's 503 does not, so it is not required)."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            for code, response in operation.get("responses", {}).items():
                if code in RESPONSE_HEADERS:
                    response.setdefault("headers", {}).update(RESPONSE_HEADERS[code])
    return result


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """`{status: OpenApiResponse(ErrorSerializer)}` for each status a view can answer."""
    return {
        code: OpenApiResponse(response=ErrorSerializer, description=_DESCRIPTIONS.get(code, ""))
        for code in statuses
    }


# --- Authentication schemes, so the schema documents how to authenticate ----------------------
from drf_spectacular.extensions import OpenApiAuthenticationExtension  # noqa: E402


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "core.auth.ApiTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A per-user API token or a service token (HOST_API_TOKEN).",
        }


class ServiceTokenScheme(BearerTokenScheme):
    target_class = "core.auth.ServiceTokenAuthentication"
    name = "serviceToken"


class SessionScheme(OpenApiAuthenticationExtension):
    target_class = "core.auth.SessionPrincipalAuthentication"
    name = "cookieAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}


class ProxyScheme(OpenApiAuthenticationExtension):
    target_class = "core.auth.ProxyAuthentication"
    name = "forwardAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "X-Forwarded-User",
            "description": "Only from HOST_TRUSTED_PROXIES with HOST_PROXY_AUTH=true.",
        }


class NoAuthScheme(OpenApiAuthenticationExtension):
    target_class = "core.auth.NoAuthDevelopmentAuthentication"
    name = "developmentNoAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "HOST_AUTH=none (local development only): no credentials.",
        }


# --- Component names -----------------------------------------------------------------------------
from drf_spectacular.openapi import AutoSchema  # noqa: E402
from drf_spectacular.plumbing import force_instance  # noqa: E402

Direction = Literal["request", "response"]


class HostAutoSchema(AutoSchema):
    """Names nested serializers after their view (`TokenListCreateApi.InputSerializer` →
    `TokenListCreateInput`), so every view can call its own `InputSerializer`/`OutputSerializer`
    without component-name collisions.

    Also states what the host enforces, so a generic client or fuzzer reads the truth: a
    `StrictSerializer` body has `additionalProperties: false` (unknown fields are a 400), and
    every write a throttle can refuse documents its 429, every operation its 406, and every
    operation that reads the database its 503 (the store unavailable)."""

    def get_serializer_name(self, serializer: Any, direction: Direction) -> str:
        parts = type(serializer).__qualname__.split(".")
        if len(parts) > 1:
            return parts[-2].removesuffix("Api") + parts[-1]
        return super().get_serializer_name(serializer, direction)

    def get_auth(self) -> list[dict[str, Any]]:
        """Operations an anonymous caller may use (public ones, and reads of public
        conversations) list the empty requirement `{}`: credentials are optional there."""
        from core.permissions import AllowAnonymousReads, Public

        auths = super().get_auth()
        permissions = self.view.get_permissions()
        anonymous = any(isinstance(p, Public) for p in permissions) or (
            self.method in {"GET", "HEAD", "OPTIONS"}
            and any(isinstance(p, AllowAnonymousReads) for p in permissions)
        )
        if anonymous and {} not in auths:
            auths.append({})
        return auths

    def _map_serializer(
        self, serializer: Any, direction: Direction, bypass_extensions: bool = False
    ) -> dict[str, Any]:
        from core.api_base import StrictSerializer

        schema = super()._map_serializer(serializer, direction, bypass_extensions)
        if isinstance(force_instance(serializer), StrictSerializer) and direction == "request":
            schema["additionalProperties"] = False
        return schema

    def _get_response_bodies(self, direction: Direction = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        # every DRF view negotiates its renderer: an Accept that allows no JSON is a 406
        responses.setdefault(
            "406",
            self._get_response_for_code(error_responses(406)[406], "406", direction=direction),
        )
        if self.method in {"POST", "PUT", "PATCH", "DELETE"} and self._write_throttled():
            responses.setdefault(
                "429",
                self._get_response_for_code(error_responses(429)[429], "429", direction=direction),
            )
        if self.view.authentication_classes:
            # transient database trouble (a lost connection, a deadlock, SQLite's "database is
            # locked") is `store/unavailable` 503 + Retry-After on any request that meets it
            # (`core.errors.as_host_error`); every operation that authenticates reads the
            # database. Only the liveness probe neither authenticates nor reads it.
            responses.setdefault(
                "503",
                self._get_response_for_code(error_responses(503)[503], "503", direction=direction),
            )
        return responses

    def _write_throttled(self) -> bool:
        from core.throttling import WriteRateThrottle

        return any(
            isinstance(throttle, WriteRateThrottle) for throttle in self.view.get_throttles()
        )
