"""Host-core API: tokens, health and readiness."""

from __future__ import annotations

import logging
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core import services
from core.api_base import (
    EmptyInputSerializer,
    IdPagination,
    ListQuerySerializer,
    StrictSerializer,
    paginated,
)
from core.auth import principal_of
from core.models import ApiToken, TokenScope
from core.permissions import Authenticated, Public
from core.renderers import HostJSONRenderer
from core.schema import error_responses

logger = logging.getLogger(__name__)


class TokenOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "scope",
            "expires_at",
            "revoked_at",
            "last_used_at",
            "created_at",
        ]


TokenPage = paginated(TokenOutputSerializer, "TokenPage")


class TokenPagination(IdPagination):
    ordering = "-id"  # newest first


class TokenListCreateApi(APIView):
    permission_classes = [Authenticated]

    class InputSerializer(StrictSerializer):
        name = serializers.CharField(
            max_length=100, required=False, default="", allow_blank=True, trim_whitespace=False
        )
        scope = serializers.ChoiceField(
            choices=TokenScope.choices,
            default=TokenScope.WRITE,
            help_text="Never wider than the calling token's; `runtime`: staff or the runtime only.",
        )
        expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)

    class CreatedSerializer(TokenOutputSerializer):
        token = serializers.CharField(help_text="The raw token. Shown once; store it now.")

        class Meta(TokenOutputSerializer.Meta):
            fields = [*TokenOutputSerializer.Meta.fields, "token"]

    @extend_schema(
        operation_id="auth_tokens_list",
        summary="The caller's API tokens, newest first",
        parameters=[ListQuerySerializer],
        responses={200: TokenPage, **error_responses(400, 401)},
    )
    def get(self, request: Request) -> Response:
        user_id = principal_of(request).user_id  # None for the service principal: no tokens
        tokens = ApiToken.objects.filter(user_id=user_id) if user_id else ApiToken.objects.none()
        paginator = TokenPagination()
        page = paginator.paginate(request, tokens, view=self)
        return paginator.get_paginated_response(TokenOutputSerializer(page, many=True).data)

    @extend_schema(
        request=InputSerializer,
        responses={201: CreatedSerializer, **error_responses(400, 401, 403, 413, 415)},
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        token, raw = services.token_mint(principal=principal_of(request), **data.validated_data)
        body = TokenOutputSerializer(token).data | {"token": raw}
        return Response(body, status=status.HTTP_201_CREATED)


class TokenRevokeApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema(responses={204: None, **error_responses(400, 401, 403, 404, 413, 415)})
    def delete(self, request: Request, token_id: int) -> Response:
        services.token_revoke(
            principal=principal_of(request),
            token_id=token_id,
            # once the token is found: the body may be empty, never carry fields
            after_access=lambda: EmptyInputSerializer(data=request.data).is_valid(
                raise_exception=True
            ),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class HealthzApi(APIView):
    """Liveness only."""

    permission_classes = [Public]
    authentication_classes: list = []

    @extend_schema(responses={200: OpenApiResponse(description="alive")})
    def get(self, request: Request) -> Response:
        return Response({"status": "ok"})


class ReadyzApi(APIView):
    """Readiness: the database, the broker, the cache, and that beat ticked recently."""

    permission_classes = [Public]
    authentication_classes: list = []

    @extend_schema(
        responses={
            200: OpenApiResponse(description="ready"),
            503: OpenApiResponse(description="not ready: `checks` names each failing check"),
        }
    )
    def get(self, request: Request) -> Response:
        readiness = services.readiness_check()
        body = {
            "status": "ready" if readiness.ready else "not_ready",
            "checks": readiness.checks,
            "beat_age_seconds": readiness.beat_age_seconds,
        }
        if readiness.ready:
            return Response(body)
        failing = sorted(name for name, ok in readiness.checks.items() if not ok)
        logger.warning("not_ready", extra={"failing": failing})
        response = Response(body, status=503)
        # an expected answer to a probe, logged above: not an `ERROR django.request` line
        response._has_been_logged = True  # type: ignore[attr-defined]
        return response


class SchemaApi(SpectacularAPIView):
    """The OpenAPI schema, in YAML or JSON as asked; its errors (a bad credential, an `Accept`
    it cannot serve) are the one JSON error body, like every other endpoint's."""

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        if response.status_code >= 400:
            request.accepted_renderer = HostJSONRenderer()
            request.accepted_media_type = HostJSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)
