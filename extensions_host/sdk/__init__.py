"""The extension SDK: the one module extension authors import.

```python
from extensions_host.sdk import Extension, Collection, Document, StateError
```

Everything here is typed (pydantic v2 for every schema) and stable within SDK major version 1.
"""

from __future__ import annotations

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
from extensions_host.sdk.context import CollectionHandle, Context, DocumentHandle
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

SDK_VERSION = "1.0.0"

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
    "AmbientRecord",
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
    "EmptyInput",
    "Extension",
    "ExtensionStop",
    "FileRef",
    "Health",
    "InteractionRecord",
    "Job",
    "JobRun",
    "MigrationRow",
    "NotReady",
    "NotificationEvent",
    "Notifier",
    "Prompt",
    "PromptAction",
    "PromptSection",
    "Provider",
    "Readiness",
    "Retry",
    "Route",
    "RunInfo",
    "SdkError",
    "SlashCommand",
    "SlashInvocation",
    "StateError",
    "TimerEvent",
    "Tool",
    "ToolModule",
    "WebUIBundle",
    "Worker",
    "WorkerWake",
    "add_job",
    "add_worker",
]
