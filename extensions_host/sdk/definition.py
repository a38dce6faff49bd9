"""The extension definition: `Extension`, its declared state (`Collection`, `Document`), its
contract (`Command`) and the hook decorators.

A definition is pure data plus functions. Nothing here touches the database: the host's runtime
(`extensions_host.runtime`) is the one place a hook is ever called.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar

from pydantic import BaseModel, ValidationError

from extensions_host.sdk.contributions import (
    NAME_RE,
    Contributions,
    Notifier,
    Provider,
    Route,
    SlashCommand,
    WebUIBundle,
    check_deadline,
)
from extensions_host.sdk.hooks import (
    CatalogHookT,
    CommandHookT,
    ContextHookT,
    LifecycleHookT,
    NotifierHookT,
    ProjectHookT,
    RouteHookT,
    RunHookT,
    SettledHookT,
    SlashHookT,
    TimerHookT,
    ToolHookT,
)
from extensions_host.sdk.models import EmptyInput

if TYPE_CHECKING:
    from extensions_host.background.declarations import Job, Worker

M = TypeVar("M", bound=BaseModel)
F = TypeVar("F", bound=Callable[..., Any])
# how hooks are stored, by slot (the decorators check their signatures: `sdk/hooks.py`)
Hook = Callable[..., Any]

# Matched whole (`\A…\Z`: `$` would let "foo\n" through). Names: `NAME_RE` (contributions).
ID_RE = re.compile(r"\A[a-z][a-z0-9_-]{0,62}\Z")

GRANTS: frozenset[str] = frozenset(
    {
        "state",
        "timers",
        "attention",
        "send",
        "settled",
        "projection",
        "commands",
        "prompt",
        "run_tools",
        "files",
        "compaction_handoff",
        "lifecycle",
        "routes",
        "notify",
        "providers",
        "host",
    }
)
LIFECYCLE_EVENTS: frozenset[str] = frozenset(
    {
        "conversation_created",
        "conversation_forked",
        "conversation_archived",
        "conversation_idle",
        "user_deleted",
    }
)
# Single-slot hooks and the grant each one serves (None: needs no grant).
HOOK_GRANTS: dict[str, str | None] = {
    "activate": None,
    "on_timer": "timers",
    "on_settled": "settled",
    "project": "projection",
    "project_catalog": "commands",
    "prompt": "prompt",
    "module_for_run": "run_tools",
    "files_for_run": "files",
    "compaction_handoff": "compaction_handoff",
    "health": None,
    "shutdown": "lifecycle",
}

MAX_KEY_CHARS = 256
MAX_RECORD_BYTES = 1024 * 1024


# the `projection` grant and the `project` hook: a projection is always encoded with its schema
MSG_PROJECTION_SCHEMA = (
    "Extension {id}: a projection needs projection_schema=<the pydantic model project returns>"
)


class DefinitionError(ValueError):
    """An extension definition that can never work (raised at import, naming the problem)."""


@dataclass(frozen=True)
class Collection(Generic[M]):
    """A named set of records of one pydantic `model`, keyed by `key(value)` (1..256 chars) and
    optionally indexed by `index(value)` (1..256 chars, or None for no index)."""

    model: type[M]
    key: Callable[[M], str]
    index: Callable[[M], str | None] | None = None

    def __post_init__(self) -> None:
        _require_model(self.model, "Collection model")
        if not callable(self.key):
            raise DefinitionError("Collection key must be a function of the value")
        if self.index is not None and not callable(self.index):
            raise DefinitionError("Collection index must be a function of the value or None")


@dataclass(frozen=True)
class Document(Generic[M]):
    """A per-conversation JSON document of one pydantic `model`.

    `initial` is what `read` returns before the first write (default: `model()`); `max_bytes`
    bounds the encoded value; `fork` says what a forked conversation starts with: a copy of the
    parent's document, or the initial value again.
    """

    model: type[M]
    initial: M | None = None
    max_bytes: int = 64 * 1024
    fork: Literal["copy", "reset"] = "copy"

    def __post_init__(self) -> None:
        _require_model(self.model, "Document model")
        if not isinstance(self.max_bytes, int) or not 1 <= self.max_bytes <= MAX_RECORD_BYTES:
            raise DefinitionError(f"Document max_bytes must be 1..{MAX_RECORD_BYTES}")
        if self.fork not in ("copy", "reset"):
            raise DefinitionError("Document fork must be 'copy' or 'reset'")
        initial = self.initial
        if initial is None:
            try:
                initial = self.model()
            except ValidationError as exc:
                raise DefinitionError("Document needs an initial value (model() fails)") from exc
            object.__setattr__(self, "initial", initial)
        if not isinstance(initial, self.model):
            raise DefinitionError("Document initial must be an instance of its model")
        if len(self.initial_json().encode()) > self.max_bytes:
            raise DefinitionError("Document initial value exceeds its max_bytes")

    def initial_json(self) -> str:
        assert self.initial is not None
        return self.initial.model_dump_json()


@dataclass(frozen=True)
class Command:
    """A declared command: its scope, input model (extra fields are errors), optional output
    model, and whether only staff may call it."""

    scope: Literal["global", "conversation"] = "conversation"
    input: type[BaseModel] = EmptyInput
    output: type[BaseModel] | None = None
    admin_only: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if self.scope not in ("global", "conversation"):
            raise DefinitionError("Command scope must be 'global' or 'conversation'")
        _require_model(self.input, "Command input")
        if self.output is not None:
            _require_model(self.output, "Command output")


@dataclass(frozen=True)
class Tool:
    """A tool of the extension's run module (grant `run_tools`); wired by run participation."""

    name: str
    input: type[BaseModel]
    handler: Hook
    description: str = ""


@dataclass
class Hooks:
    """The functions an extension defined, by slot."""

    single: dict[str, Hook] = field(default_factory=dict)
    commands: dict[str, Hook] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)
    lifecycle: dict[str, Hook] = field(default_factory=dict)


_UNSET: Any = object()


class _CommandFields(TypedDict, total=False):
    """The `Command` fields `Extension.command` was given (the others keep their defaults)."""

    scope: Literal["global", "conversation"]
    input: type[BaseModel]
    output: type[BaseModel] | None
    admin_only: bool
    description: str


class Extension:
    """One extension: identity, requested grants, declared state, contract and hooks.

    ```python
    notes = Extension(id="notes", version="1.0.0", grants={"state", "commands"},
                      collections={"note": Collection(Note, key=lambda n: n.id)})

    @notes.command("add", scope="conversation", input=AddNote)
    def add(ctx, conversation_id, data): ...
    ```
    """

    def __init__(
        self,
        *,
        id: str | None = None,
        version: str | None = None,
        grants: Iterable[str] = (),
        sdk: str = ">=1,<2",
        state_version: int = 1,
        collections: Mapping[str, Collection[Any]] | None = None,
        documents: Mapping[str, Document[Any]] | None = None,
        migrations: Mapping[int, Callable[[dict[str, Any]], list[dict[str, Any]]]] | None = None,
        projection_schema: type[BaseModel] | None = None,
        commands: Mapping[str, Command] | None = None,
        deadline_s: float | None = None,
        auto_resume: bool = True,
        description: str = "",
        interaction_kinds: Iterable[str] = (),
        ambient_kinds: Iterable[str] = (),
        name: str | None = None,
        routes: Iterable[Route] = (),
        slash_commands: Iterable[SlashCommand] = (),
        notifiers: Iterable[Notifier] = (),
        providers: Iterable[Provider] = (),
        skills: Iterable[str] = (),
        webui_bundles: Iterable[WebUIBundle] = (),
        settings_model: type[BaseModel] | None = None,
        workers: Iterable[Worker] = (),
        jobs: Iterable[Job] = (),
    ) -> None:
        # A contributor-only extension (providers, skills, bundles; no hooks, no state) may
        # identify itself by `name` alone (spec 05).
        self.contributor_only = id is None and name is not None
        if id is None:
            id = name
            version = "0.0.0" if version is None else version
        if not isinstance(id, str) or not ID_RE.match(id):
            raise DefinitionError(f"Extension id {id!r} must match {ID_RE.pattern}")
        if not isinstance(version, str) or not 1 <= len(version) <= 64:
            raise DefinitionError(f"Extension {id}: version must be 1..64 characters")
        requested = frozenset(grants)
        unknown = sorted(requested - GRANTS)
        if unknown:
            raise DefinitionError(f"Extension {id}: unknown grants {unknown}")
        if not isinstance(state_version, int) or state_version < 1:
            raise DefinitionError(f"Extension {id}: state_version must be an integer >= 1")
        check_deadline(deadline_s, f"Extension {id}")
        if projection_schema is not None:
            _require_model(projection_schema, f"Extension {id}: projection_schema")
        elif "projection" in requested:
            raise DefinitionError(MSG_PROJECTION_SCHEMA.format(id=id))
        self.id = id
        self.version = version
        self.grants = requested
        self.sdk = sdk
        self.state_version = state_version
        self.collections: dict[str, Collection[Any]] = _named(id, "collection", collections)
        self.documents: dict[str, Document[Any]] = _named(id, "document", documents)
        self.commands: dict[str, Command] = _named(id, "command", commands)
        self.migrations = dict(migrations or {})
        for version_from, step in self.migrations.items():
            if not isinstance(version_from, int) or not 1 <= version_from < state_version:
                raise DefinitionError(
                    f"Extension {id}: migration keys are the version upgraded from "
                    f"(1..{state_version - 1})"
                )
            if not callable(step):
                raise DefinitionError(
                    f"Extension {id}: migration from {version_from} is not a function"
                )
        self.projection_schema = projection_schema
        self.deadline_s = deadline_s
        self.auto_resume = auto_resume
        self.description = description
        self.interaction_kinds = tuple(interaction_kinds)
        self.ambient_kinds = tuple(ambient_kinds)
        self.hooks = Hooks()
        self.name = name or id
        if settings_model is not None:
            _require_model(settings_model, f"Extension {id}: settings_model")
        self.settings_model = settings_model
        self.contributions = Contributions()
        for route in routes:
            self.contributions.add_route(id, route)
        for slash in slash_commands:
            self.contributions.add_slash(id, slash)
        for notifier in notifiers:
            self.contributions.add_notifier(id, notifier)
        for provider in providers:
            self.contributions.add_provider(id, provider)
        for skill in [skills] if isinstance(skills, str) else skills:
            self.contributions.add_skill(id, skill)
        for bundle in webui_bundles:
            self.contributions.add_bundle(id, bundle)
        self._check_contribution_grants()
        self.workers: tuple[Worker, ...] = ()
        self.jobs: tuple[Job, ...] = ()
        if workers or jobs:
            # imported here: the declarations module imports this one
            from extensions_host.background.declarations import add_job, add_worker

            for worker in workers:
                add_worker(self, worker)
            for job in jobs:
                add_job(self, job)
        # The defining module: its source is part of the code fingerprint.
        self.module_name: str = sys._getframe(1).f_globals.get("__name__", "")

    def __repr__(self) -> str:
        return f"<Extension {self.id} {self.version}>"

    def _check_contribution_grants(self) -> None:
        for kind, grant in self.contributions.required_grants().items():
            if grant not in self.grants:
                raise DefinitionError(
                    f"Extension {self.id}: declares {kind} but does not request the {grant} grant"
                )

    # --- contribution decorators (spec 05) ------------------------------------------------

    def route(
        self,
        method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"],
        path: str,
        *,
        auth: Literal["user", "admin", "public"] = "user",
        body_limit: int | None = None,
        deadline_s: float | None = None,
    ) -> Callable[[RouteHookT], RouteHookT]:
        """`@ext.route("POST", "inbound", auth="public")` → `handler(ctx, request)`."""

        def decorate(fn: RouteHookT) -> RouteHookT:
            options: dict[str, Any] = {"auth": auth, "deadline_s": deadline_s}
            if body_limit is not None:
                options["body_limit"] = body_limit
            self.contributions.add_route(self.id, Route(method, path, fn, **options))
            self._check_contribution_grants()
            return fn

        return decorate

    def slash(
        self,
        name: str,
        *,
        description: str = "",
        args_hint: str = "",
        deadline_s: float | None = None,
    ) -> Callable[[SlashHookT], SlashHookT]:
        """`@ext.slash("todo", description=…, deadline_s=None)` → `run(ctx, invocation)`;
        `deadline_s` as `SlashCommand`'s (the request deadline by default)."""

        def decorate(fn: SlashHookT) -> SlashHookT:
            command = SlashCommand(
                name, fn, description=description, args_hint=args_hint, deadline_s=deadline_s
            )
            self.contributions.add_slash(self.id, command)
            self._check_contribution_grants()
            return fn

        return decorate

    def notifier(
        self, name: str, *, deadline_s: float | None = None
    ) -> Callable[[NotifierHookT], NotifierHookT]:
        """`@ext.notifier("ntfy", deadline_s=None)` → `notify(ctx, event)`; `deadline_s` as
        `Notifier`'s (the worker deadline by default)."""

        def decorate(fn: NotifierHookT) -> NotifierHookT:
            self.contributions.add_notifier(self.id, Notifier(name, fn, deadline_s=deadline_s))
            self._check_contribution_grants()
            return fn

        return decorate

    # --- hook decorators (each returns the function as given: `sdk/hooks.py`) ------------

    def _slot(self, slot: str, fn: F) -> F:
        if not callable(fn):
            raise DefinitionError(f"Extension {self.id}: {slot} must decorate a function")
        if slot in self.hooks.single:
            raise DefinitionError(f"Extension {self.id}: {slot} is defined twice")
        self.hooks.single[slot] = fn
        return fn

    def activate(self, fn: ContextHookT) -> ContextHookT:
        """`activate(ctx)`: per-process, read-only setup; runs again after a resume."""
        return self._slot("activate", fn)

    def on_timer(self, fn: TimerHookT) -> TimerHookT:
        """`on_timer(ctx, timer: TimerEvent)` (grant `timers`)."""
        return self._slot("on_timer", fn)

    def on_settled(self, fn: SettledHookT) -> SettledHookT:
        """`on_settled(ctx, runs)` — an ordered batch of settled runs (grant `settled`)."""
        return self._slot("on_settled", fn)

    def project(self, fn: ProjectHookT) -> ProjectHookT:
        """`project(ctx, conversation_id) -> projection_schema | None`, read-only."""
        if self.projection_schema is None:
            raise DefinitionError(MSG_PROJECTION_SCHEMA.format(id=self.id))
        return self._slot("project", fn)

    def project_catalog(self, fn: CatalogHookT) -> CatalogHookT:
        """`project_catalog(value, catalog) -> list[CatalogEntry]` (or `project_catalog(value)`):
        adapt the command catalog to the projected value (read-only)."""
        return self._slot("project_catalog", fn)

    def prompt(self, fn: RunHookT) -> RunHookT:
        """`prompt(ctx, run) -> [{name, text}]`, read-only (grant `prompt`)."""
        return self._slot("prompt", fn)

    def module_for_run(self, fn: RunHookT) -> RunHookT:
        """`module_for_run(ctx, run) -> ToolModule | list[str] | None` (grant `run_tools`)."""
        return self._slot("module_for_run", fn)

    def files_for_run(self, fn: RunHookT) -> RunHookT:
        """`files_for_run(ctx, run) -> list[FileRef]` (grant `files`)."""
        return self._slot("files_for_run", fn)

    def compaction_handoff(self, fn: RunHookT) -> RunHookT:
        """`compaction_handoff(ctx, run) -> JSON | None` (grant `compaction_handoff`)."""
        return self._slot("compaction_handoff", fn)

    def health(self, fn: ContextHookT) -> ContextHookT:
        """`health(ctx) -> Health`."""
        return self._slot("health", fn)

    def shutdown(self, fn: ContextHookT) -> ContextHookT:
        """`shutdown(ctx)`: best effort, as a worker process exits (grant `lifecycle`)."""
        return self._slot("shutdown", fn)

    def on_lifecycle(self, event: str) -> Callable[[LifecycleHookT], LifecycleHookT]:
        """`@ext.on_lifecycle("conversation_forked")` → `handler(ctx, event)` (grant
        `lifecycle`)."""
        if event not in LIFECYCLE_EVENTS:
            raise DefinitionError(f"Extension {self.id}: unknown lifecycle event {event!r}")

        def decorate(fn: LifecycleHookT) -> LifecycleHookT:
            if event in self.hooks.lifecycle:
                raise DefinitionError(f"Extension {self.id}: {event} handler is defined twice")
            self.hooks.lifecycle[event] = fn
            return fn

        return decorate

    def command(
        self,
        name: str,
        *,
        scope: Literal["global", "conversation"] = _UNSET,
        input: type[BaseModel] = _UNSET,
        output: type[BaseModel] | None = _UNSET,
        admin_only: bool = _UNSET,
        description: str = _UNSET,
    ) -> Callable[[CommandHookT], CommandHookT]:
        """Declare a command and its handler, or attach the handler of a command declared in
        `commands=`. Handlers: `(ctx, conversation_id, data)` for conversation scope,
        `(ctx, data)` for global scope; the return value is the response."""
        given: _CommandFields = {}
        if scope is not _UNSET:
            given["scope"] = scope
        if input is not _UNSET:
            given["input"] = input
        if output is not _UNSET:
            given["output"] = output
        if admin_only is not _UNSET:
            given["admin_only"] = admin_only
        if description is not _UNSET:
            given["description"] = description
        if name in self.commands:
            if given:
                raise DefinitionError(f"Extension {self.id}: command {name} is declared twice")
        else:
            if not isinstance(name, str) or not NAME_RE.match(name):
                raise DefinitionError(f"Extension {self.id}: command name {name!r} is invalid")
            self.commands[name] = Command(**given)

        def decorate(fn: CommandHookT) -> CommandHookT:
            if name in self.hooks.commands:
                raise DefinitionError(
                    f"Extension {self.id}: command {name} handler is defined twice"
                )
            self.hooks.commands[name] = fn
            return fn

        return decorate

    def tool(
        self,
        name: str,
        *,
        input: type[BaseModel],
        description: str = "",
    ) -> Callable[[ToolHookT], ToolHookT]:
        """Declare a tool of the run module: `handler(ctx, run, arguments)` (grant
        `run_tools`)."""
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise DefinitionError(f"Extension {self.id}: tool name {name!r} is invalid")
        _require_model(input, f"Extension {self.id}: tool {name} input")

        def decorate(fn: ToolHookT) -> ToolHookT:
            if name in self.hooks.tools:
                raise DefinitionError(f"Extension {self.id}: tool {name} is defined twice")
            self.hooks.tools[name] = Tool(
                name=name, input=input, handler=fn, description=description
            )
            return fn

        return decorate

    # --- the declared contract (what the revision hashes) ---------------------------------

    def contract(self) -> dict[str, Any]:
        """The declared contract as canonical JSON data: a change here is a new revision."""
        try:
            return {
                "id": self.id,
                "version": self.version,
                "grants": sorted(self.grants),
                "state_version": self.state_version,
                "collections": {
                    name: {
                        "schema": spec.model.model_json_schema(),
                        "indexed": spec.index is not None,
                    }
                    for name, spec in sorted(self.collections.items())
                },
                "documents": {
                    name: {
                        "schema": spec.model.model_json_schema(),
                        "initial": spec.initial_json(),
                        "max_bytes": spec.max_bytes,
                        "fork": spec.fork,
                    }
                    for name, spec in sorted(self.documents.items())
                },
                "commands": {
                    name: {
                        "scope": spec.scope,
                        "input": spec.input.model_json_schema(),
                        "output": spec.output.model_json_schema() if spec.output else None,
                        "admin_only": spec.admin_only,
                    }
                    for name, spec in sorted(self.commands.items())
                },
                "projection_schema": (
                    self.projection_schema.model_json_schema() if self.projection_schema else None
                ),
                "tools": {
                    name: tool.input.model_json_schema()
                    for name, tool in sorted(self.hooks.tools.items())
                },
                "interaction_kinds": sorted(self.interaction_kinds),
                "ambient_kinds": sorted(self.ambient_kinds),
            } | self._contributions_contract()
        except Exception as exc:  # a model pydantic cannot describe
            raise DefinitionError(
                f"Extension {self.id}: contract has no JSON schema: {exc}"
            ) from exc

    def _contributions_contract(self) -> dict[str, Any]:
        # only what is present: an extension without contributions, workers or jobs keeps its
        # revision
        extra: dict[str, Any] = self.contributions.contract()
        if self.name != self.id:
            extra["name"] = self.name
        if self.settings_model is not None:
            extra["settings_schema"] = self.settings_model.model_json_schema()
        if self.workers:
            extra["workers"] = {worker.name: worker.contract() for worker in self.workers}
        if self.jobs:
            extra["jobs"] = {job.name: job.contract() for job in self.jobs}
        return extra


def _require_model(model: Any, what: str) -> None:
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise DefinitionError(f"{what} must be a pydantic BaseModel subclass")


def _named(extension_id: str, what: str, items: Mapping[str, Any] | None) -> dict[str, Any]:
    result = dict(items or {})
    for name in result:
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise DefinitionError(f"Extension {extension_id}: {what} name {name!r} is invalid")
    return result
