"""The extension SDK: the one module extension authors import.

```python
from extensions_host.sdk import Extension, Collection, Document, StateError
```

Everything here is typed (pydantic v2 for every schema) and stable within SDK major version 1.
"""

from __future__ import annotations

from extensions_host.sdk.context import CollectionHandle, Context, DocumentHandle
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

SDK_VERSION = "1.0.0"

__all__ = [
    "GRANTS",
    "HOOK_GRANTS",
    "LIFECYCLE_EVENTS",
    "MAX_KEY_CHARS",
    "MAX_RECORD_BYTES",
    "SDK_VERSION",
    "AdmissionError",
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
    "MigrationRow",
    "Retry",
    "SdkError",
    "StateError",
    "TimerEvent",
    "Tool",
]
