"""Contribution endpoints (spec 05, 07): meta, auth check, slash commands, skill files and the
extension route catch-all. Views are thin: validate, call one service, serialise."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed, NotAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from conversations.selectors import conversation_get
from core.api_base import ListQuerySerializer, RowsPagination, StrictSerializer, paginated
from core.auth import principal_of
from core.permissions import Authenticated, Public, RuntimeOrAdmin
from core.schema import error_responses
from extensions_host.contributions.packages import content_type_of
from extensions_host.contributions.services.meta import meta_build
from extensions_host.contributions.services.providers import providers_readiness
from extensions_host.contributions.services.routes import route_dispatch
from extensions_host.contributions.services.skills import skill_file
from extensions_host.contributions.services.slash import (
    ARGS_MAX,
    command_position,
    slash_command_run,
    slash_commands_list,
)

# --- meta --------------------------------------------------------------------------------------


class HealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ok", "degraded"])
    detail = serializers.CharField(required=False)


class MetaExtensionSerializer(serializers.Serializer):
    id = serializers.CharField()
    version = serializers.CharField()
    status = serializers.ChoiceField(choices=["running", "stopped", "uninstalled"])
    reason = serializers.CharField(allow_blank=True)
    health = HealthSerializer()


class MetaRouteSerializer(serializers.Serializer):
    extension_id = serializers.CharField()
    method = serializers.CharField()
    path = serializers.CharField()
    url = serializers.CharField()
    auth = serializers.ChoiceField(choices=["user", "admin", "public"])
    body_limit = serializers.IntegerField()
    available = serializers.BooleanField()


class MetaNotifierSerializer(serializers.Serializer):
    extension_id = serializers.CharField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=["ok", "degraded"])
    consecutive_failures = serializers.IntegerField()
    failed_deliveries = serializers.IntegerField()
    delivered = serializers.IntegerField()
    last_error = serializers.CharField(allow_blank=True)


class ProviderSerializer(serializers.Serializer):
    name = serializers.CharField()
    extension_id = serializers.CharField()
    models = serializers.ListField(child=serializers.CharField())
    default_model = serializers.CharField(allow_null=True)


class CollisionSerializer(serializers.Serializer):
    name = serializers.CharField()
    extensions = serializers.ListField(child=serializers.CharField())
    winner = serializers.CharField()


class ProvidersCatalogSerializer(serializers.Serializer):
    providers = ProviderSerializer(many=True)
    default_model = serializers.CharField(allow_null=True)
    default_model_source = serializers.CharField(allow_null=True)
    collisions = CollisionSerializer(many=True)


class SkillSerializer(serializers.Serializer):
    extension_id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    url = serializers.CharField()


class BundleSerializer(serializers.Serializer):
    extension_id = serializers.CharField()
    name = serializers.CharField()
    selected = serializers.BooleanField()


class MigrationProblemSerializer(serializers.Serializer):
    id = serializers.CharField()
    reason = serializers.CharField()


class LagSerializer(serializers.Serializer):
    available = serializers.BooleanField(
        help_text="False: the background app is not installed; the figures are placeholders."
    )
    settled = serializers.DictField(help_text="{core_cursor, consumers: {id: {cursor, lag}}}")
    timers = serializers.DictField(help_text="{due, pending, oldest_due_age_ms}")
    outbox = serializers.DictField(help_text="{unfanned, pending: {extension: n}}")


class MetaSerializer(serializers.Serializer):
    version = serializers.CharField()
    sdk_version = serializers.CharField()
    health = HealthSerializer()
    extensions = MetaExtensionSerializer(many=True)
    routes = MetaRouteSerializer(many=True)
    notifiers = MetaNotifierSerializer(many=True)
    providers = ProvidersCatalogSerializer()
    skills = SkillSerializer(many=True)
    webui_bundles = BundleSerializer(many=True)
    workers = serializers.ListField(child=serializers.DictField())
    jobs = serializers.ListField(child=serializers.DictField())
    background_available = serializers.BooleanField()
    incompatible_migrations = MigrationProblemSerializer(many=True)
    lag = LagSerializer()


class MetaApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema(
        operation_id="meta_retrieve",
        summary="Version, roster statuses, health, routes, workers, jobs and lag figures",
        responses={200: MetaSerializer, **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(MetaSerializer(meta_build()).data)


# --- auth check --------------------------------------------------------------------------------


class PrincipalSerializer(serializers.Serializer):
    user = serializers.CharField(allow_null=True)
    name = serializers.CharField(allow_blank=True)
    email = serializers.CharField(allow_blank=True)
    admin = serializers.BooleanField()
    service = serializers.BooleanField()
    method = serializers.CharField()
    scope = serializers.CharField()


class ReadinessSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["not_configured", "degraded", "ready"])
    detail = serializers.CharField(required=False)


class ProviderReadinessSerializer(serializers.Serializer):
    name = serializers.CharField()
    extension_id = serializers.CharField()
    readiness = ReadinessSerializer(allow_null=True)


class AuthCheckSerializer(serializers.Serializer):
    principal = PrincipalSerializer()
    providers = ProviderReadinessSerializer(many=True)


class AuthCheckApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema(
        operation_id="auth_check",
        summary="Who is calling, and each provider's readiness (verbatim)",
        responses={200: AuthCheckSerializer, **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        body = {
            "principal": {
                "user": principal.user.get_username() if principal.is_authenticated else None,
                "name": principal.name,
                "email": principal.email,
                "admin": principal.admin,
                "service": principal.service,
                "method": principal.method,
                "scope": principal.scope,
            },
            "providers": providers_readiness(),
        }
        return Response(AuthCheckSerializer(body).data)


# --- slash commands ----------------------------------------------------------------------------


class SlashCommandSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    args_hint = serializers.CharField(allow_blank=True)
    # DRF's metaclass moves declared fields off the class, so this never shadows
    # `Field.source` at runtime; the stubs see a class attribute overriding it
    source = serializers.CharField(  # type: ignore[assignment]
        help_text='"core" or the contributing extension id.'
    )


SlashCommandPage = paginated(SlashCommandSerializer, "SlashCommandPage")


class CommandPagination(RowsPagination):
    def position_of(self, row: dict[str, Any]) -> str:
        return command_position(row)  # the order of `slash_commands_list`


class CommandListApi(APIView):
    permission_classes = [Authenticated]

    @extend_schema(
        operation_id="commands_list",
        summary="Core and extension slash commands: core first, then by name",
        parameters=[ListQuerySerializer],
        responses={200: SlashCommandPage, **error_responses(400, 401)},
    )
    def get(self, request: Request) -> Response:
        paginator = CommandPagination()
        page = paginator.paginate(request, slash_commands_list(), view=self)
        return paginator.get_paginated_response(SlashCommandSerializer(page, many=True).data)


@extend_schema_field({"type": "string", "maxLength": ARGS_MAX})
class SlashArgsField(serializers.CharField):
    """Slash command arguments: the schema publishes their bound, `slash_command_run` checks it
    (one place, one message: `Command arguments are longer than 4096 characters`)."""


class ConversationSlashCommandApi(APIView):
    permission_classes = [Authenticated]

    class InputSerializer(StrictSerializer):
        args = SlashArgsField(required=False, default="", allow_blank=True, trim_whitespace=False)

    class OutputSerializer(serializers.Serializer):
        notice = serializers.CharField(required=False)
        conversation_id = serializers.CharField(
            required=False, help_text="fork: the new conversation."
        )

    @extend_schema(
        operation_id="conversations_slash_command",
        summary="Run a slash command in a conversation (owner)",
        request=InputSerializer,
        responses={
            200: OutputSerializer,
            **error_responses(400, 401, 403, 404, 409, 413, 415, 422, 429, 503),
        },
    )
    def post(self, request: Request, conversation_id: str, name: str) -> Response:
        principal = principal_of(request)
        # access first (spec 01: 404, then 403), and only then the body
        conversation_get(principal=principal, conversation_id=conversation_id, write=True)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = slash_command_run(
            principal=principal,
            conversation_id=conversation_id,
            name=name,
            args=data.validated_data["args"],
        )
        return Response(self.OutputSerializer(result).data)


# --- skill files -------------------------------------------------------------------------------


class SkillFileApi(APIView):
    permission_classes = [RuntimeOrAdmin]

    @extend_schema(
        operation_id="skills_file",
        summary="A file of a contributed skill, read-only (runtime or admin)",
        responses={
            (200, "application/octet-stream"): OpenApiResponse(
                OpenApiTypes.BINARY, description="The file (text types are served as text)."
            ),
            **error_responses(401, 403, 404),
        },
    )
    def get(self, request: Request, extension_id: str, skill: str, path: str) -> HttpResponseBase:
        found = skill_file(extension_id=extension_id, skill=skill, path=path)
        content_type, attachment = content_type_of(found)
        if content_type.startswith("text/html"):
            content_type, attachment = "text/plain; charset=utf-8", False  # never rendered
        response = FileResponse(
            found.open("rb"), content_type=content_type, as_attachment=attachment
        )
        response["X-Content-Type-Options"] = "nosniff"
        return response


# --- extension routes --------------------------------------------------------------------------

ROUTE_ERRORS = error_responses(400, 401, 403, 404, 405, 409, 413, 422, 429, 503)


class ExtensionRouteApi(APIView):
    """`/v1/ext/{extension_id}/{path}`: routes extensions contribute. Their bodies and
    responses are the extension's own, so the schema marks this catch-all
    (`x-extension-route`) for generic clients and fuzzers to exclude."""

    permission_classes = [Public]  # each route's own auth level is enforced by the service
    credentials_rejected = False

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # an extension route answers with its own content type, whatever the client accepts
        return super().perform_content_negotiation(request, force=True)

    def perform_authentication(self, request: Request) -> None:
        # Credentials that fail authentication leave the request anonymous here: whether that
        # is a 401 is the route's auth level's call (`route_dispatch`) — a public route's
        # caller may send an `Authorization` of its own (a webhook's shared secret).
        try:
            request.user  # noqa: B018  (authenticates)
        except (AuthenticationFailed, NotAuthenticated):
            self.credentials_rejected = True

    def _dispatch(self, request: Request, extension_id: str, path: str) -> HttpResponseBase:
        return route_dispatch(
            request=request._request,
            principal=principal_of(request),
            credentials_rejected=self.credentials_rejected,
            extension_id=extension_id,
            path=path,
        )

    _schema = extend_schema(
        summary="An extension-contributed route (its own request and response)",
        tags=["extension-routes"],
        request=OpenApiTypes.ANY,
        responses={
            200: OpenApiResponse(OpenApiTypes.ANY, description="The extension's response."),
            204: OpenApiResponse(description="No content."),
            **ROUTE_ERRORS,
        },
        extensions={"x-extension-route": True, "x-fuzz-exclude": True},
    )

    @_schema
    def get(self, request: Request, extension_id: str, path: str) -> HttpResponseBase:
        return self._dispatch(request, extension_id, path)

    @_schema
    def post(self, request: Request, extension_id: str, path: str) -> HttpResponseBase:
        return self._dispatch(request, extension_id, path)

    @_schema
    def put(self, request: Request, extension_id: str, path: str) -> HttpResponseBase:
        return self._dispatch(request, extension_id, path)

    @_schema
    def patch(self, request: Request, extension_id: str, path: str) -> HttpResponseBase:
        return self._dispatch(request, extension_id, path)

    @_schema
    def delete(self, request: Request, extension_id: str, path: str) -> HttpResponseBase:
        return self._dispatch(request, extension_id, path)

    # `APIView.options` answers DRF's metadata with a `Response`; this one, like `get` & co.,
    # takes the URL's arguments and answers what the route does (APIView.dispatch accepts any
    # HttpResponseBase): an override the stubs cannot express
    def options(  # type: ignore[override]
        self, request: Request, extension_id: str, path: str
    ) -> HttpResponseBase:
        # through the route table like every method (no route answers OPTIONS: 404 or 405),
        # never DRF's metadata about this view
        return self._dispatch(request, extension_id, path)
