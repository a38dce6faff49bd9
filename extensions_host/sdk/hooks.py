"""The signatures of the functions an extension hands the host, as mypy checks them.

Every decorator of `Extension` takes one of these and returns it unchanged (so the author's own
signature survives decoration); a function the host would call with other arguments — a wrong
arity, a `TimerEvent` parameter on a route — is a type error at the decorator. Results are
`object`: the host checks them when the hook returns. Command handlers are the exception: their
arity follows the command's scope (`(ctx, conversation_id, data)` or `(ctx, data)`), which may
be declared apart from the handler (`commands=`), so only the runtime checks it.

The Django-backed argument types (`RunSettledEvent`, `LifecycleEvent`, `HttpRequest`) are
named in string bounds: importing the SDK imports neither the ORM nor the runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from extensions_host.sdk.context import Context
from extensions_host.sdk.contributions import NotificationEvent, SlashInvocation
from extensions_host.sdk.models import CatalogEntry, TimerEvent
from extensions_host.surfaces.types import RunInfo

if TYPE_CHECKING:
    from django.http import HttpRequest

    from conversations.selectors import RunSettledEvent
    from extensions_host.background.services.reader import LifecycleEventView

# `activate(ctx)`, `health(ctx)`, `shutdown(ctx)`
ContextHookT = TypeVar("ContextHookT", bound=Callable[[Context], object])
# `on_timer(ctx, timer)`
TimerHookT = TypeVar("TimerHookT", bound=Callable[[Context, TimerEvent], object])
# `on_settled(ctx, runs)`
SettledHookT = TypeVar("SettledHookT", bound="Callable[[Context, list[RunSettledEvent]], object]")
# `handler(ctx, event)` of `@ext.on_lifecycle(kind)`
LifecycleHookT = TypeVar("LifecycleHookT", bound="Callable[[Context, LifecycleEventView], object]")
# `project(ctx, conversation_id)`
ProjectHookT = TypeVar("ProjectHookT", bound=Callable[[Context, str], object])
# `project_catalog(value, catalog)` or `project_catalog(value)`
CatalogHookT = TypeVar(
    "CatalogHookT",
    bound=Callable[[Any, list[CatalogEntry]], object] | Callable[[Any], object],
)
# `prompt`, `module_for_run`, `files_for_run`, `compaction_handoff`: `(ctx, run)`
RunHookT = TypeVar("RunHookT", bound=Callable[[Context, RunInfo], object])
# `handler(ctx, run, arguments)` of `@ext.tool` (`arguments`: an instance of its input model)
ToolHookT = TypeVar("ToolHookT", bound=Callable[[Context, RunInfo, Any], object])
# `(ctx, conversation_id, data)` or `(ctx, data)` of `@ext.command`, by scope
CommandHookT = TypeVar("CommandHookT", bound=Callable[..., object])
# `handler(ctx, request)` of `@ext.route`
RouteHookT = TypeVar("RouteHookT", bound="Callable[[Context, HttpRequest], object]")
# `run(ctx, invocation)` of `@ext.slash`
SlashHookT = TypeVar("SlashHookT", bound=Callable[[Context, SlashInvocation], object])
# `notify(ctx, event)` of `@ext.notifier`
NotifierHookT = TypeVar("NotifierHookT", bound=Callable[[Context, NotificationEvent], object])
