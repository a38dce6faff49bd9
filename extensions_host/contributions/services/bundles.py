"""Web UI bundles: static front-ends extensions ship; the one `HOST_WEBUI_BUNDLE` selects is
served at `/ui/` (static files, safe content types, no listing, no path escape). An unknown
selection is a startup error naming what is available."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings

from core.errors import MSG_NOT_FOUND, HostError
from extensions_host import registry
from extensions_host.contributions.packages import file_in, inside, package_dir
from extensions_host.registry import ExtensionLoadError, LoadedExtension
from extensions_host.sdk import Extension

INDEX = "index.html"


@dataclass(frozen=True)
class Bundle:
    extension_id: str
    name: str
    root: Path


@lru_cache(maxsize=512)
def bundles_resolve(definition: Extension) -> tuple[Bundle, ...]:
    """The extension's bundles, checked: inside the package, a directory with `index.html`."""
    declared = definition.contributions.webui_bundles
    if not declared:
        return ()
    base = package_dir(definition)
    result = []
    for bundle in declared:
        root = inside(
            base, bundle.dir, what=f"web UI bundle {bundle.name} dir", extension_id=definition.id
        )
        if not (root / INDEX).is_file():
            raise ExtensionLoadError(
                f"Extension {definition.id}: web UI bundle {bundle.name} has no {INDEX}"
            )
        result.append(Bundle(definition.id, bundle.name, root))
    return tuple(result)


def bundles_check(extensions: dict[str, LoadedExtension]) -> dict[str, Bundle]:
    """All bundles by name (a name contributed twice is a load error), and the selection
    must name one of them."""
    by_name: dict[str, Bundle] = {}
    for loaded in extensions.values():
        for bundle in bundles_resolve(loaded.definition):
            previous = by_name.get(bundle.name)
            if previous is not None:
                raise ExtensionLoadError(
                    f"Web UI bundle {bundle.name!r} is contributed twice: by "
                    f"{previous.extension_id} and by {bundle.extension_id}"
                )
            by_name[bundle.name] = bundle
    selected = settings.HOST_WEBUI_BUNDLE
    if selected and selected not in by_name:
        available = ", ".join(sorted(by_name)) or "none"
        raise ExtensionLoadError(
            f"HOST_WEBUI_BUNDLE {selected!r} is not contributed by any installed extension "
            f"(available: {available})"
        )
    return by_name


def bundles_list() -> list[dict[str, Any]]:
    selected = settings.HOST_WEBUI_BUNDLE
    return [
        {"extension_id": b.extension_id, "name": b.name, "selected": b.name == selected}
        for loaded in registry.loaded().values()
        for b in bundles_resolve(loaded.definition)
    ]


def bundle_selected() -> Bundle | None:
    selected = settings.HOST_WEBUI_BUNDLE
    if not selected:
        return None
    return bundles_check(registry.loaded()).get(selected)


def bundle_file(*, path: str) -> Path:
    """The file of the selected bundle at `path` (`""` → `index.html`); 404 otherwise."""
    bundle = bundle_selected()
    found = file_in(bundle.root, path or INDEX) if bundle is not None else None
    if found is None:
        raise HostError("store", "not_found", MSG_NOT_FOUND)
    return found
