"""Skills: directories an extension contributes (each with a `SKILL.md`), resolved inside the
extension package at load, listed in `/v1/meta`, returned at claim, and served read-only at
`GET /v1/skills/{extension}/{skill}/{path}` (spec 05)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from core.errors import MSG_NOT_FOUND, HostError
from extensions_host import registry
from extensions_host.contributions.packages import file_in, inside, package_dir
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.registry import ExtensionLoadError, LoadedExtension
from extensions_host.sdk import Extension

SKILL_FILE = "SKILL.md"
SKILL_NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
DESCRIPTION_MAX = 1024
FRONT_MATTER_MAX = 16 * 1024


@dataclass(frozen=True)
class Skill:
    extension_id: str
    name: str
    description: str
    root: Path


@lru_cache(maxsize=512)
def skills_resolve(definition: Extension) -> tuple[Skill, ...]:
    """The extension's skills, checked: each directory stays inside the package, exists and
    holds a `SKILL.md` whose front matter (if any) is valid. Raises `ExtensionLoadError`."""
    directories = definition.contributions.skills
    if not directories:
        return ()
    base = package_dir(definition)
    skills: dict[str, Skill] = {}
    for directory in directories:
        root = inside(base, directory, what="skill directory", extension_id=definition.id)
        manifest = root / SKILL_FILE
        if not manifest.is_file():
            raise ExtensionLoadError(
                f"Extension {definition.id}: skill directory {directory!r} has no {SKILL_FILE}"
            )
        front = _front_matter(manifest, definition.id, directory)
        name = str(front.get("name") or root.name)
        if not SKILL_NAME_RE.match(name):
            raise ExtensionLoadError(
                f"Extension {definition.id}: skill name {name!r} must match "
                "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
            )
        if name in skills:
            raise ExtensionLoadError(f"Extension {definition.id}: skill {name!r} is twice")
        description = str(front.get("description") or "")[:DESCRIPTION_MAX]
        skills[name] = Skill(definition.id, name, description, root)
    return tuple(skills.values())


def _front_matter(manifest: Path, extension_id: str, directory: str) -> dict[str, Any]:
    text = manifest.read_text(encoding="utf-8", errors="replace")[:FRONT_MATTER_MAX]
    if not text.startswith("---"):
        return {}
    end = text.find("\n---", 3)
    if end < 0:
        raise ExtensionLoadError(
            f"Extension {extension_id}: {directory}/{SKILL_FILE} front matter is not closed"
        )
    try:
        data = yaml.safe_load(text[3:end])
    except yaml.YAMLError as exc:
        raise ExtensionLoadError(
            f"Extension {extension_id}: {directory}/{SKILL_FILE} front matter is invalid"
        ) from exc
    return data if isinstance(data, dict) else {}


def skill_url(extension_id: str, name: str) -> str:
    base = settings.HOST_PUBLIC_URL.rstrip("/")
    return f"{base}/v1/skills/{extension_id}/{name}/"


def skills_list(*, include_uninstalled: bool = False) -> list[dict[str, Any]]:
    """Every contributed skill of an installed extension: `{extension_id, name, description,
    url}` (the url is the prefix of its read-only files; `SKILL.md` is at `<url>SKILL.md`)."""
    gone = set(
        RosterEntry.objects.filter(status=ExtensionStatus.UNINSTALLED).values_list("pk", flat=True)
    )
    result = []
    for loaded in registry.loaded().values():
        if loaded.id in gone and not include_uninstalled:
            continue
        for skill in skills_resolve(loaded.definition):
            result.append(
                {
                    "extension_id": loaded.id,
                    "name": skill.name,
                    "description": skill.description,
                    "url": skill_url(loaded.id, skill.name),
                }
            )
    return result


def skills_for_claim() -> list[dict[str, Any]]:
    """What a run claim returns to the runtime (name, description, read-only URL)."""
    return skills_list()


def skill_file(*, extension_id: str, skill: str, path: str) -> Path:
    """The file of a skill, read-only; 404 for anything else (no listing, no escape)."""
    loaded: LoadedExtension | None = registry.get(extension_id)
    if (
        loaded is None
        or RosterEntry.objects.filter(pk=extension_id, status=ExtensionStatus.UNINSTALLED).exists()
    ):  # an uninstalled extension's skills are neither listed nor served
        raise HostError("store", "not_found", MSG_NOT_FOUND)
    match = next((s for s in skills_resolve(loaded.definition) if s.name == skill), None)
    found = file_in(match.root, path) if match is not None else None
    if found is None:
        raise HostError("store", "not_found", MSG_NOT_FOUND)
    return found
