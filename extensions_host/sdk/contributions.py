"""What an extension contributes besides hooks (spec 05): HTTP routes, slash commands,
notifiers, model providers, skills and web UI bundles, plus the values the host hands them.

Pure data plus functions (no Django import). Impossible declarations raise `DefinitionError`
when the extension module is imported, so a bad contribution is a load-time error naming it.

```python
from extensions_host.sdk import Extension, Route, SlashCommand, Notifier

bridge = Extension(
    id="bridge", version="1.0.0", grants={"routes", "commands", "notify", "send"},
    routes=[Route("POST", "inbound", handler=inbound, auth="public", body_limit=64 * 1024)],
    slash_commands=[SlashCommand("todo", run=add_todo, description="Add a todo")],
    notifiers=[Notifier("ntfy", notify=push)],
)
```
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ROUTE_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
ROUTE_AUTH = ("user", "admin", "public")
ROUTE_BODY_LIMIT_DEFAULT = 1024 * 1024
# The largest body a route may accept: the middleware reads a chunked body up to its limit.
ROUTE_BODY_LIMIT_MAX = 16 * 1024 * 1024
# Relative path segments of unreserved URL characters; no empty, `.` or `..` segments.
ROUTE_PATH_RE = re.compile(r"\A[A-Za-z0-9_~-][A-Za-z0-9._~-]*(/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*\Z")
ROUTE_PATH_MAX = 256
SLASH_NAME_RE = re.compile(r"\A[a-z][a-z0-9-]*\Z")
SLASH_NAME_MAX = 64
CORE_SLASH_COMMANDS = ("help", "fork", "archive", "rename", "share")
# The name of anything an extension declares (commands, tools, collections, providers,
# notifiers): matched whole (`\A…\Z`: `$` would let a trailing newline through).
NAME_RE = re.compile(r"\A[a-z][a-z0-9_-]{0,63}\Z")
BUNDLE_NAME_RE = re.compile(r"\A[a-z][a-z0-9_-]*\Z")
NOTIFICATION_TYPES = ("interaction.pending", "job.failed", "run.settled")
MAX_DEADLINE_SECONDS = 300.0


def _definition_error(message: str) -> Exception:
    from extensions_host.sdk.definition import DefinitionError

    return DefinitionError(message)


def check_deadline(deadline_s: float | None, what: str) -> None:
    if deadline_s is not None and (
        isinstance(deadline_s, bool)
        or not isinstance(deadline_s, int | float)
        or not 0 < deadline_s <= MAX_DEADLINE_SECONDS
    ):
        raise _definition_error(f"{what}: deadline_s must be in (0, 300]")


@dataclass(frozen=True)
class Route:
    """An HTTP route mounted at `/v1/ext/<extension-id>/<path>` (grant `routes`).

    `handler(ctx, request)` gets the extension's context (`ctx.host`, `ctx.stores`,
    `ctx.transact`, `ctx.caller`) and the Django request (`request.principal` is the caller);
    it returns a Django response, JSON data (→ 200 JSON) or None (→ 204). It runs outside any
    frame: writes go through `ctx.transact`/`ctx.update`.
    """

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
    path: str
    handler: Callable[..., Any]
    auth: Literal["user", "admin", "public"] = "user"
    body_limit: int = ROUTE_BODY_LIMIT_DEFAULT
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        what = f"Route {self.method} {self.path!r}"
        if self.method not in ROUTE_METHODS:
            raise _definition_error(f"{what}: method must be one of {', '.join(ROUTE_METHODS)}")
        if (
            not isinstance(self.path, str)
            or len(self.path) > ROUTE_PATH_MAX
            or not ROUTE_PATH_RE.match(self.path)
            or any(segment in {".", ".."} for segment in self.path.split("/"))
        ):
            raise _definition_error(
                f"{what}: path must be a relative path of URL-safe segments (no '..')"
            )
        if self.auth not in ROUTE_AUTH:
            raise _definition_error(f"{what}: auth must be user, admin or public")
        if (
            isinstance(self.body_limit, bool)
            or not isinstance(self.body_limit, int)
            or not 0 <= self.body_limit <= ROUTE_BODY_LIMIT_MAX
        ):
            raise _definition_error(f"{what}: body_limit must be 0..{ROUTE_BODY_LIMIT_MAX} bytes")
        if not callable(self.handler):
            raise _definition_error(f"{what}: handler must be a function")
        check_deadline(self.deadline_s, what)


@dataclass(frozen=True)
class SlashCommand:
    """A slash command (grant `commands`): `run(ctx, invocation) -> {"notice": str} | str |
    None`, invoked with `POST /v1/conversations/{cid}/commands/{name}` by the owner."""

    name: str
    run: Callable[..., Any]
    description: str = ""
    args_hint: str = ""
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not SLASH_NAME_RE.match(self.name):
            raise _definition_error(
                f"Slash command name {self.name!r} must match ^[a-z][a-z0-9-]*$"
            )
        if len(self.name) > SLASH_NAME_MAX:
            raise _definition_error(f"Slash command name {self.name!r} is too long")
        if self.name in CORE_SLASH_COMMANDS:
            raise _definition_error(
                f"Slash command {self.name!r} shadows the core command {self.name} "
                f"(reserved: {', '.join(CORE_SLASH_COMMANDS)})"
            )
        if not callable(self.run):
            raise _definition_error(f"Slash command {self.name}: run must be a function")
        if not isinstance(self.description, str) or len(self.description) > 500:
            raise _definition_error(f"Slash command {self.name}: description is over 500 chars")
        if not isinstance(self.args_hint, str) or len(self.args_hint) > 200:
            raise _definition_error(f"Slash command {self.name}: args_hint is over 200 chars")
        check_deadline(self.deadline_s, f"Slash command {self.name}")


@dataclass(frozen=True)
class Notifier:
    """A notification transport (grant `notify`): `notify(ctx, event: NotificationEvent)`.

    Called asynchronously by a worker, outside any frame, deadline-bounded; a raise (or `Retry`)
    is retried with backoff a bounded number of times, then the notifier is reported degraded.
    A delivery failure never stops the extension."""

    name: str
    notify: Callable[..., Any]
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise _definition_error(
                f"Notifier name {self.name!r} must match ^[a-z][a-z0-9_-]{{0,63}}$"
            )
        if not callable(self.notify):
            raise _definition_error(f"Notifier {self.name}: notify must be a function")
        check_deadline(self.deadline_s, f"Notifier {self.name}")


@dataclass(frozen=True)
class Provider:
    """A model provider for the agent runtime (grant `providers`).

    `default_model` proposes the default (the last proposer wins unless `HOST_DEFAULT_MODEL` is
    configured); `readiness()` is a synchronous read of extension-owned state returning
    `Readiness` (or `{"status": …, "detail": …}`), reported verbatim by `GET /v1/auth/check`.
    """

    name: str
    models: tuple[str, ...] = ()
    default_model: str | None = None
    readiness: Callable[..., Any] | None = None

    def __init__(
        self,
        name: str,
        models: Iterable[str] = (),
        default_model: str | None = None,
        readiness: Callable[..., Any] | None = None,
    ) -> None:
        listed = (models,) if isinstance(models, str) else tuple(models)
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise _definition_error(f"Provider name {name!r} must match ^[a-z][a-z0-9_-]{{0,63}}$")
        if not all(isinstance(m, str) and 1 <= len(m) <= 200 for m in listed):
            raise _definition_error(f"Provider {name}: models must be strings of 1..200 chars")
        if default_model is not None and (
            not isinstance(default_model, str) or not 1 <= len(default_model) <= 200
        ):
            raise _definition_error(f"Provider {name}: default_model must be 1..200 chars")
        if readiness is not None and not callable(readiness):
            raise _definition_error(f"Provider {name}: readiness must be a function")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "models", listed)
        object.__setattr__(self, "default_model", default_model)
        object.__setattr__(self, "readiness", readiness)


@dataclass(frozen=True)
class WebUIBundle:
    """A static front-end bundle: `dir` (relative to the extension module's directory) holds
    `index.html`; served at `/ui/` when `HOST_WEBUI_BUNDLE` selects `name`."""

    name: str
    dir: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not BUNDLE_NAME_RE.match(self.name):
            raise _definition_error(
                f"Web UI bundle name {self.name!r} must match ^[a-z][a-z0-9_-]*$"
            )
        if not isinstance(self.dir, str) or not self.dir:
            raise _definition_error(f"Web UI bundle {self.name}: dir must be a path")


@dataclass
class Contributions:
    """Everything an extension contributes besides hooks, as declared."""

    routes: list[Route] = field(default_factory=list)
    slash_commands: list[SlashCommand] = field(default_factory=list)
    notifiers: list[Notifier] = field(default_factory=list)
    providers: list[Provider] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)
    webui_bundles: list[WebUIBundle] = field(default_factory=list)

    def add_route(self, owner: str, route: Route) -> None:
        if not isinstance(route, Route):
            raise _definition_error(f"Extension {owner}: routes must be Route values")
        if any(r.method == route.method and r.path == route.path for r in self.routes):
            raise _definition_error(
                f"Extension {owner}: route {route.method} {route.path} is declared twice"
            )
        self.routes.append(route)

    def add_slash(self, owner: str, command: SlashCommand) -> None:
        if not isinstance(command, SlashCommand):
            raise _definition_error(f"Extension {owner}: slash_commands must be SlashCommand")
        if any(c.name == command.name for c in self.slash_commands):
            raise _definition_error(
                f"Extension {owner}: slash command {command.name} is declared twice"
            )
        self.slash_commands.append(command)

    def add_notifier(self, owner: str, notifier: Notifier) -> None:
        if not isinstance(notifier, Notifier):
            raise _definition_error(f"Extension {owner}: notifiers must be Notifier values")
        if any(n.name == notifier.name for n in self.notifiers):
            raise _definition_error(f"Extension {owner}: notifier {notifier.name} is twice")
        self.notifiers.append(notifier)

    def add_provider(self, owner: str, provider: Provider) -> None:
        if not isinstance(provider, Provider):
            raise _definition_error(f"Extension {owner}: providers must be Provider values")
        if any(p.name == provider.name for p in self.providers):
            raise _definition_error(f"Extension {owner}: provider {provider.name} is twice")
        self.providers.append(provider)

    def add_skill(self, owner: str, directory: str) -> None:
        if not isinstance(directory, str) or not directory:
            raise _definition_error(f"Extension {owner}: skills must be directory paths")
        self.skills.append(directory)

    def add_bundle(self, owner: str, bundle: WebUIBundle) -> None:
        if not isinstance(bundle, WebUIBundle):
            raise _definition_error(f"Extension {owner}: webui_bundles must be WebUIBundle")
        if any(b.name == bundle.name for b in self.webui_bundles):
            raise _definition_error(f"Extension {owner}: web UI bundle {bundle.name} is twice")
        self.webui_bundles.append(bundle)

    def required_grants(self) -> dict[str, str]:
        """What each declared kind needs: contribution kind → grant."""
        needed: dict[str, str] = {}
        if self.routes:
            needed["routes"] = "routes"
        if self.slash_commands:
            needed["slash_commands"] = "commands"
        if self.notifiers:
            needed["notifiers"] = "notify"
        if self.providers:
            needed["providers"] = "providers"
        return needed

    def contract(self) -> dict[str, Any]:
        """The declared contributions as canonical data (only kinds that are present, so an
        extension without contributions keeps its revision)."""
        result: dict[str, Any] = {}
        if self.routes:
            result["routes"] = sorted([r.method, r.path, r.auth, r.body_limit] for r in self.routes)
        if self.slash_commands:
            result["slash_commands"] = sorted(
                [c.name, c.description, c.args_hint] for c in self.slash_commands
            )
        if self.notifiers:
            result["notifiers"] = sorted(n.name for n in self.notifiers)
        if self.providers:
            result["providers"] = sorted(
                [p.name, list(p.models), p.default_model] for p in self.providers
            )
        if self.skills:
            result["skills"] = list(self.skills)
        if self.webui_bundles:
            result["webui_bundles"] = sorted([b.name, b.dir] for b in self.webui_bundles)
        return result


# --- values the host hands to contributions ---------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NotificationEvent(_Frozen):
    """What a notifier receives. `url` is `<HOST_PUBLIC_URL>/inspect/<conversation_id>` when a
    public URL is configured."""

    type: Literal["interaction.pending", "job.failed", "run.settled"]
    conversation_id: str | None = None
    job_id: str | None = None
    user: str | None = None
    title: str
    body: str = ""
    url: str | None = None


class SlashInvocation(_Frozen):
    """What a slash command's `run(ctx, invocation)` receives."""

    conversation_id: str
    name: str
    args: str = ""
    username: str
    admin: bool = False


class Health(_Frozen):
    """What the `health()` hook returns (a dict of the same shape is accepted)."""

    status: Literal["ok", "degraded"]
    detail: str | None = Field(default=None, max_length=512)


class Readiness(_Frozen):
    """What a provider's `readiness()` returns (a dict of the same shape is accepted)."""

    status: Literal["not_configured", "degraded", "ready"]
    detail: str | None = Field(default=None, max_length=512)
