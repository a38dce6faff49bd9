"""Files an extension ships in its package (skills, web UI bundles): resolution at load, with
no path escape, and safe serving of one file.

The "package" of an extension is the directory of the module that defines it (where its
relative paths anchor, like the seed's extension entry directory).
"""

from __future__ import annotations

import mimetypes
import sys
from pathlib import Path

from extensions_host.registry import ExtensionLoadError
from extensions_host.sdk import Extension

# What we serve, by suffix. Anything else is served as a download (never rendered).
SAFE_TYPES: dict[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".ico": "image/x-icon",
    ".woff": "font/woff",
    ".woff2": "font/woff2",
    ".wasm": "application/wasm",
}
DOWNLOAD_TYPE = "application/octet-stream"
MAX_RELATIVE_PATH = 1024


def package_dir(definition: Extension) -> Path:
    """The directory of the extension's defining module (resolved)."""
    module = sys.modules.get(definition.module_name)
    path = getattr(module, "__file__", None)
    if not path:
        raise ExtensionLoadError(
            f"Extension {definition.id}: its module {definition.module_name!r} has no file, so "
            "its package directory is unknown"
        )
    return Path(path).resolve().parent


def inside(base: Path, relative: str, *, what: str, extension_id: str) -> Path:
    """`relative` resolved under `base`, which it must stay strictly inside (symlinks
    followed); an escape or a missing directory is a load error naming it."""
    candidate = (base / relative).resolve()
    if candidate == base or not candidate.is_relative_to(base):
        raise ExtensionLoadError(
            f"Extension {extension_id}: {what} {relative!r} escapes its package ({base})"
        )
    if not candidate.is_dir():
        raise ExtensionLoadError(
            f"Extension {extension_id}: {what} {relative!r} is not a directory ({candidate})"
        )
    return candidate


def file_in(root: Path, relative: str) -> Path | None:
    """The regular file at `relative` under `root`, or None: for an escape (`..`, an absolute
    path, a symlink out), a directory (no listing), a hidden segment or anything missing."""
    if not relative or len(relative) > MAX_RELATIVE_PATH or "\x00" in relative:
        return None
    parts = relative.replace("\\", "/").split("/")
    if any(part in {"", ".", ".."} or part.startswith(".") for part in parts):
        return None
    try:
        candidate = (root / "/".join(parts)).resolve()
    except (OSError, ValueError):
        return None
    if not candidate.is_relative_to(root) or not candidate.is_file():
        return None
    return candidate


def content_type_of(path: Path) -> tuple[str, bool]:
    """(content type, as attachment): known safe types are served inline, others as a
    download so a browser never renders them."""
    safe = SAFE_TYPES.get(path.suffix.lower())
    if safe is not None:
        return safe, False
    guessed, _ = mimetypes.guess_type(path.name)
    if guessed and guessed.startswith(("image/", "font/")) and guessed != "image/svg+xml":
        return guessed, False
    return DOWNLOAD_TYPE, True
