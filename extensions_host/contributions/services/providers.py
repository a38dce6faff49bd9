"""Model providers contributed by extensions (spec 05, grant `providers`): the catalog the
agent runtime reads, default-model resolution and name-collision records, and each provider's
readiness for `GET /v1/auth/check`.

Resolution follows the seed: providers merge in load order (extension id order) and the last
contributor of a name wins; every collision is recorded and shown. `HOST_DEFAULT_MODEL`, when
set, is the default; otherwise the last contributor to propose a default model wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from pydantic import ValidationError

from extensions_host import registry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import InvalidResult, run_frame
from extensions_host.sdk import Provider, Readiness
from extensions_host.services.roster import extensions_running_with

MSG_READINESS_INVALID = "Provider readiness result is invalid"


@dataclass(frozen=True)
class Contributed:
    extension_id: str
    provider: Provider


def _contributed() -> list[Contributed]:
    """Providers of installed extensions that run with `providers` admitted, in load order."""
    return [
        Contributed(extension_id, provider)
        for extension_id, loaded in extensions_running_with("providers")
        for provider in loaded.definition.contributions.providers
    ]


def providers_catalog() -> dict[str, Any]:
    """`{providers, default_model, default_model_source, collisions}`."""
    by_name: dict[str, Contributed] = {}
    collisions: dict[str, list[str]] = {}
    default_model: str | None = None
    default_source: str | None = None
    for item in _contributed():
        name = item.provider.name
        previous = by_name.get(name)
        if previous is not None:
            collisions.setdefault(name, [previous.extension_id]).append(item.extension_id)
        by_name[name] = item  # the last contributor wins
        if item.provider.default_model:
            default_model = item.provider.default_model
            default_source = f"extension:{item.extension_id}"
    if settings.HOST_DEFAULT_MODEL:
        default_model, default_source = settings.HOST_DEFAULT_MODEL, "configured"
    records = [
        {"name": name, "extensions": owners, "winner": owners[-1]}
        for name, owners in sorted(collisions.items())
    ]
    return {
        "providers": [
            {
                "name": name,
                "extension_id": item.extension_id,
                "models": list(item.provider.models),
                "default_model": item.provider.default_model,
            }
            for name, item in sorted(by_name.items())
        ],
        "default_model": default_model,
        "default_model_source": default_source,
        "collisions": records,
    }


def _readiness_of(loaded: LoadedExtension, provider: Provider) -> dict[str, Any] | None:
    if provider.readiness is None:
        return None
    readiness = provider.readiness

    def validate(value: Any) -> dict[str, Any]:
        try:
            checked = value if isinstance(value, Readiness) else Readiness.model_validate(value)
        except ValidationError as exc:
            raise InvalidResult(MSG_READINESS_INVALID) from exc
        return checked.model_dump(exclude_none=True)

    outcome = run_frame(
        extension_id=loaded.id,
        hook=f"readiness {provider.name}",
        call=lambda ctx: readiness(),
        mode="read",
        failures="stop",
        boundary="request",
        validate=validate,
    )
    if outcome.ok:
        return outcome.value
    return {"status": "degraded", "detail": outcome.reason or "Extension is unavailable"}


def providers_readiness() -> list[dict[str, Any]]:
    """Each contributed provider's readiness, verbatim (`null`: it declares no tracker). A
    tracker that raises is a defect of its extension (stopped; reported degraded)."""
    result = []
    for item in _contributed():
        loaded = registry.get(item.extension_id)
        if loaded is None:
            continue
        result.append(
            {
                "name": item.provider.name,
                "extension_id": item.extension_id,
                "readiness": _readiness_of(loaded, item.provider),
            }
        )
    return result
