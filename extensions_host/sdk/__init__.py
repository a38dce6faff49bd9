"""The extension SDK: the one module extension authors import.

```python
from extensions_host.sdk import Extension, Collection, Document, StateError
```

Everything here is typed (pydantic v2 for every schema) and stable within SDK major version 1.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Background declarations (workers, jobs) and conversation types live beside the services that
# use them; authors import them from here, the one public surface.
from extensions_host.background.declarations import (
    Job,
    JobRun,
    PromptAction,
    Worker,
    WorkerWake,
    add_job,
    add_worker,
)
from extensions_host.sdk.context import (
    AmbientHandle,
    AttentionHandle,
    CollectionHandle,
    Context,
    DocumentHandle,
    DocumentsHandle,
    HostAccessHandle,
    HostConversationsHandle,
    HostHandle,
    HostIdentityHandle,
    HostUsersHandle,
    InteractionsHandle,
    PathsHandle,
    SecretsHandle,
    SendHandle,
    SettingsHandle,
    StoresHandle,
    TimersHandle,
)
from extensions_host.sdk.contributions import (
    CORE_SLASH_COMMANDS,
    Health,
    NotificationEvent,
    Notifier,
    Provider,
    Readiness,
    Route,
    SlashCommand,
    SlashInvocation,
    WebUIBundle,
)
from extensions_host.sdk.definition import (
    GRANTS,
    HOOK_GRANTS,
    LIFECYCLE_EVENTS,
    MAX_KEY_CHARS,
    MAX_RECORD_BYTES,
    Collection,
    Command,
    DefinitionError,
    Document,
    Extension,
    Tool,
)
from extensions_host.sdk.errors import (
    AdmissionError,
    CommandError,
    ExtensionStop,
    Retry,
    SdkError,
    StateError,
)
from extensions_host.sdk.models import Caller, CatalogEntry, EmptyInput, MigrationRow, TimerEvent
from extensions_host.surfaces.types import (
    Accepted,
    AmbientRecord,
    AttentionItem,
    FileRef,
    InteractionRecord,
    NotReady,
    Prompt,
    PromptSection,
    RunInfo,
    ToolModule,
)

if TYPE_CHECKING:
    from conversations.selectors import RunSettledEvent
    from core.auth import Principal
    from core.errors import HostError
    from extensions_host.background.services.reader import EntryPage, EntryRecord
    from extensions_host.background.services.reader import LifecycleEventView as LifecycleEvent

SDK_VERSION = "1.0.0"

# Types defined beside the services that build them, which need Django's models and the
# runtime: exported lazily (PEP 562), so importing the SDK imports neither (nor a cycle back
# into it). `from extensions_host.sdk import RunSettledEvent` works as for any other name.
_LAZY: dict[str, tuple[str, str]] = {
    # `on_settled(ctx, runs: list[RunSettledEvent])`
    "RunSettledEvent": ("conversations.selectors", "RunSettledEvent"),
    # a lifecycle handler's `event` (`event.kind`, `.data`, `.entry(id)`, `.entries()`, …)
    "LifecycleEvent": ("extensions_host.background.services.reader", "LifecycleEventView"),
    # what `event.entries(...)` and `event.entry(id)` return
    "EntryPage": ("extensions_host.background.services.reader", "EntryPage"),
    "EntryRecord": ("extensions_host.background.services.reader", "EntryRecord"),
    # `request.principal` in a route; what `ctx.host.access.access_of` takes
    "Principal": ("core.auth", "Principal"),
    # what a read outside a frame raises on store trouble (`store/unavailable`)
    "HostError": ("core.errors", "HostError"),
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = target
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


__all__ = [
    "CORE_SLASH_COMMANDS",
    "GRANTS",
    "HOOK_GRANTS",
    "LIFECYCLE_EVENTS",
    "MAX_KEY_CHARS",
    "MAX_RECORD_BYTES",
    "SDK_VERSION",
    "Accepted",
    "AdmissionError",
    "AmbientHandle",
    "AmbientRecord",
    "AttentionHandle",
    "AttentionItem",
    "Caller",
    "CatalogEntry",
    "Collection",
    "CollectionHandle",
    "Command",
    "CommandError",
    "Context",
    "DefinitionError",
    "Document",
    "DocumentHandle",
    "DocumentsHandle",
    "EmptyInput",
    "EntryPage",
    "EntryRecord",
    "Extension",
    "ExtensionStop",
    "FileRef",
    "Health",
    "HostAccessHandle",
    "HostConversationsHandle",
    "HostError",
    "HostHandle",
    "HostIdentityHandle",
    "HostUsersHandle",
    "InteractionRecord",
    "InteractionsHandle",
    "Job",
    "JobRun",
    "LifecycleEvent",
    "MigrationRow",
    "NotReady",
    "NotificationEvent",
    "Notifier",
    "PathsHandle",
    "Principal",
    "Prompt",
    "PromptAction",
    "PromptSection",
    "Provider",
    "Readiness",
    "Retry",
    "Route",
    "RunInfo",
    "RunSettledEvent",
    "SdkError",
    "SecretsHandle",
    "SendHandle",
    "SettingsHandle",
    "SlashCommand",
    "SlashInvocation",
    "StateError",
    "StoresHandle",
    "TimerEvent",
    "TimersHandle",
    "Tool",
    "ToolModule",
    "WebUIBundle",
    "Worker",
    "WorkerWake",
    "add_job",
    "add_worker",
]
