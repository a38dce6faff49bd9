"""Discovery of installed extensions and their revisions (loaded per process, lazily).

Extensions come from Python entry points (group `hyphae.extensions`) and from the
`HOST_EXTENSIONS` setting (dotted paths: `package.module:attr`, `package.module.attr`, or a
module holding exactly one `Extension`). Two extensions with one id, or an extension whose
supported SDK range excludes this host's SDK, are startup errors that name both sides.

Nothing here runs from `AppConfig.ready`: the first caller (`sync_roster`, a frame, an API view)
loads the set once per process.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from extensions_host.sdk import SDK_VERSION, Extension

ENTRY_POINT_GROUP = "hyphae.extensions"


class ExtensionLoadError(ImproperlyConfigured):
    """An installed extension set that cannot start (duplicate id, SDK mismatch, bad path)."""


@dataclass(frozen=True)
class LoadedExtension:
    """An extension as this process loaded it: its definition, where it came from, the revision
    of its declared contract and the fingerprint of its code."""

    definition: Extension
    source: str
    revision: str
    fingerprint: str
    contract: dict[str, Any] = field(repr=False)

    @property
    def id(self) -> str:
        return self.definition.id


_lock = threading.Lock()
_loaded: dict[str, LoadedExtension] | None = None
_override: list[LoadedExtension] | None = None
# Called with every loaded set before it is used (contribution checks: skill directories,
# web UI bundles, slash command names, route body limits). A raise is a load error.
load_listeners: list[Callable[[dict[str, LoadedExtension]], None]] = []


def revision_of(contract: dict[str, Any]) -> str:
    """sha256 of the canonical contract (version, grants, state, commands, schemas)."""
    canonical = json.dumps(contract, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def fingerprint_of(definition: Extension, revision: str) -> str:
    """The revision plus the bytes of the defining module: identifies the loaded code."""
    digest = hashlib.sha256(revision.encode())
    module = sys.modules.get(definition.module_name)
    path = getattr(module, "__file__", None)
    if path and Path(path).is_file():
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def check_sdk(definition: Extension) -> None:
    try:
        supported = SpecifierSet(definition.sdk)
    except InvalidSpecifier as exc:
        raise ExtensionLoadError(
            f"Extension {definition.id} declares an invalid SDK range {definition.sdk!r}"
        ) from exc
    if not supported.contains(Version(SDK_VERSION), prereleases=True):
        raise ExtensionLoadError(
            f"Extension {definition.id} supports SDK {definition.sdk} but this host provides "
            f"SDK {SDK_VERSION}"
        )


def load_one(definition: Extension, source: str) -> LoadedExtension:
    if not isinstance(definition, Extension):
        raise ExtensionLoadError(f"{source} is not an extensions_host.sdk.Extension")
    check_sdk(definition)
    contract = definition.contract()
    revision = revision_of(contract)
    return LoadedExtension(
        definition=definition,
        source=source,
        revision=revision,
        fingerprint=fingerprint_of(definition, revision),
        contract=contract,
    )


def load(candidates: Iterable[tuple[str, Extension]]) -> dict[str, LoadedExtension]:
    """Check and index candidates `(source, definition)`; duplicate ids are an error naming
    both sources."""
    result: dict[str, LoadedExtension] = {}
    for source, definition in candidates:
        loaded = load_one(definition, source)
        previous = result.get(loaded.id)
        if previous is not None:
            if previous.definition is definition:
                continue  # listed twice (entry point and setting): the same object
            raise ExtensionLoadError(
                f"Extension id {loaded.id!r} is defined twice: by {previous.source} and by {source}"
            )
        result[loaded.id] = loaded
    ordered = dict(sorted(result.items()))
    for listener in load_listeners:
        listener(ordered)
    return ordered


def resolve(path: str) -> Extension:
    """`module:attr`, `module.attr`, or a module with exactly one Extension attribute."""
    if ":" in path:
        module_name, _, attr = path.partition(":")
        return _attribute(_import(module_name, path), attr, path)
    try:
        module = importlib.import_module(path)
    except ImportError:
        module_name, _, attr = path.rpartition(".")
        if not module_name:
            raise ExtensionLoadError(f"HOST_EXTENSIONS entry {path!r} cannot be imported") from None
        return _attribute(_import(module_name, path), attr, path)
    found = [value for value in vars(module).values() if isinstance(value, Extension)]
    if len(found) != 1:
        raise ExtensionLoadError(
            f"HOST_EXTENSIONS entry {path!r} is a module with {len(found)} extensions; "
            "name one as module:attribute"
        )
    return found[0]


def _import(module_name: str, path: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ExtensionLoadError(f"Extension {path!r} cannot be imported: {exc}") from exc


def _attribute(module: ModuleType, attr: str, path: str) -> Extension:
    value = getattr(module, attr, None)
    if value is None:
        raise ExtensionLoadError(f"Extension {path!r}: the module has no attribute {attr!r}")
    return value


def discover() -> list[tuple[str, Extension]]:
    """Every installed candidate: entry points first, then `HOST_EXTENSIONS` in order."""
    candidates: list[tuple[str, Extension]] = []
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        source = f"entry point {entry_point.name} ({entry_point.value})"
        try:
            value = entry_point.load()
        except Exception as exc:
            raise ExtensionLoadError(f"Extension {source} cannot be loaded: {exc}") from exc
        candidates.append((source, value))
    for path in settings.HOST_EXTENSIONS:
        candidates.append((f"HOST_EXTENSIONS {path}", resolve(path)))
    return candidates


def loaded() -> dict[str, LoadedExtension]:
    """The extensions this process runs, by id (sorted). Loaded once per process."""
    global _loaded
    if _override is not None:
        return {item.id: item for item in _override}
    with _lock:
        if _loaded is None:
            _loaded = load(discover())
        return _loaded


def get(extension_id: str) -> LoadedExtension | None:
    return loaded().get(extension_id)


def reset() -> None:
    """Forget what this process loaded (the next call re-discovers): a process restart."""
    global _loaded
    with _lock:
        _loaded = None


@contextmanager
def installed(*definitions: Extension) -> Iterator[dict[str, LoadedExtension]]:
    """Run with exactly these extensions installed in this process (tests, the author
    harness). Nests; restores what was installed before."""
    global _override
    previous = _override
    items = load((f"installed {d.id}", d) for d in definitions)
    _override = list(items.values())
    try:
        yield items
    finally:
        _override = previous
