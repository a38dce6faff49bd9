"""Deploy checks (`manage.py check --deploy`) for Hyphae's own dangers: weak secrets and
tokens, `/metrics` or forward-auth open to every address, extension secrets no configured key
can read.

Each names the variable and the fix. The production settings with good values give none
(tests/core/test_deploy_checks.py).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.core import checks

# Random values of at least 32 characters (`secrets.token_urlsafe(32)` gives 43): a service
# token is a password with the service principal's power, and the secrets key guards every
# extension secret; neither should be guessable offline or online.
SECRET_MIN_LENGTH = 32
SECRET_MIN_UNIQUE = 5
GENERATE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _weak(value: str) -> bool:
    return len(value) < SECRET_MIN_LENGTH or len(set(value)) < SECRET_MIN_UNIQUE


def _everyone(networks: Iterable[IpNetwork]) -> list[str]:
    """The networks that hold every address (`0.0.0.0/0`, `::/0`)."""
    return [str(network) for network in networks if network.prefixlen == 0]


@checks.register(checks.Tags.security, deploy=True)
def secret_key_check(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    key = settings.HOST_SECRET_KEY
    if not key:
        return [
            checks.Warning(
                "HOST_SECRET_KEY is not set: extension secrets are encrypted with a key derived "
                "from SECRET_KEY, so rotating SECRET_KEY (after a leak, say) leaves every stored "
                "secret unreadable.",
                hint=f"Set HOST_SECRET_KEY to a random value of at least {SECRET_MIN_LENGTH} "
                f"characters ({GENERATE}). Secrets already stored: list the current SECRET_KEY "
                "in HOST_SECRET_KEYS_OLD, restart, run `manage.py secrets_reencrypt` "
                "(docs/operating.md).",
                id="hyphae.W002",
            )
        ]
    if _weak(key):
        return [
            checks.Warning(
                f"HOST_SECRET_KEY is shorter than {SECRET_MIN_LENGTH} characters or has fewer "
                f"than {SECRET_MIN_UNIQUE} different ones: every extension secret is only as "
                "safe as this key.",
                hint=f"Set a random value of at least {SECRET_MIN_LENGTH} characters ({GENERATE}),"
                " move the old one to HOST_SECRET_KEYS_OLD, restart, run "
                "`manage.py secrets_reencrypt`.",
                id="hyphae.W002",
            )
        ]
    return []


@checks.register(checks.Tags.security, deploy=True)
def api_token_check(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    weak = [str(n) for n, token in enumerate(settings.HOST_API_TOKEN, start=1) if _weak(token)]
    if not weak:
        return []
    return [
        checks.Warning(
            f"HOST_API_TOKEN: token {', '.join(weak)} of the list is shorter than "
            f"{SECRET_MIN_LENGTH} characters or has fewer than {SECRET_MIN_UNIQUE} different "
            "ones: a service token acts as the service principal (every runtime endpoint, every "
            "conversation), so it must not be guessable.",
            hint=f"Use random tokens of at least {SECRET_MIN_LENGTH} characters ({GENERATE}); "
            "list the new one beside the old, update the callers, then drop the old one.",
            id="hyphae.W003",
        )
    ]


@checks.register(checks.Tags.security, deploy=True)
def metrics_access_check(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    everyone = _everyone(settings.HOST_METRICS_NETWORKS)
    if not everyone:
        return []
    return [
        checks.Warning(
            f"HOST_METRICS_NETWORKS contains {', '.join(everyone)}: every address may read "
            "/metrics without a token (HOST_METRICS_TOKEN lets more callers in; it keeps "
            "nobody from a listed network out).",
            hint="List only the scraper's networks (the default is loopback), or set "
            "HOST_METRICS_NETWORKS= (empty) and HOST_METRICS_TOKEN to a random value.",
            id="hyphae.W004",
        )
    ]


@checks.register(checks.Tags.security, deploy=True)
def proxy_auth_check(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    if not settings.HOST_PROXY_AUTH:
        return []
    everyone = _everyone(settings.HOST_TRUSTED_PROXIES)
    if everyone:
        return [
            checks.Warning(
                f"HOST_PROXY_AUTH is on and HOST_TRUSTED_PROXIES contains {', '.join(everyone)}:"
                " forward-auth headers are believed from every address, so anyone who reaches "
                f"the host can act as any user, admins included ({settings.HOST_PROXY_ADMIN_GROUP}"
                " group).",
                hint="List only the reverse proxy's own addresses in HOST_TRUSTED_PROXIES.",
                id="hyphae.W005",
            )
        ]
    if not settings.HOST_TRUSTED_PROXIES:
        return [
            checks.Warning(
                "HOST_PROXY_AUTH is on but HOST_TRUSTED_PROXIES is empty: forward-auth headers "
                "are ignored from every address, so nobody signs in through the proxy.",
                hint="List the reverse proxy's addresses in HOST_TRUSTED_PROXIES, or set "
                "HOST_PROXY_AUTH=false.",
                id="hyphae.W006",
            )
        ]
    return []


@checks.register(checks.Tags.security, deploy=True)
def unreadable_secrets_check(
    app_configs: object = None, databases: Sequence[str] | None = None, **kwargs: object
) -> list[checks.CheckMessage]:
    """Extension secrets encrypted under a key the configured ones do not provide.

    It reads the database, so (like Django's database checks) only when asked to:
    `check --deploy --database default`. Without tables or a database it says nothing: a
    process must start (and `migrate` run) whatever this finds."""
    if not databases or "default" not in databases:
        return []
    from django.db import DatabaseError

    try:
        unreadable = unreadable_secrets()
    except DatabaseError:
        return []
    if not unreadable:
        return []
    total = sum(unreadable.values())
    where = ", ".join(f"{ext} (key id {key_id}): {n}" for (ext, key_id), n in unreadable.items())
    return [
        checks.Warning(
            f"{total} extension secret(s) are encrypted with a key that neither HOST_SECRET_KEY "
            f"nor HOST_SECRET_KEYS_OLD provides, so they cannot be read (503 at use): {where}.",
            hint="Put the key that encrypted them back (in HOST_SECRET_KEYS_OLD; the key id is "
            "a hash of it), restart, then run `manage.py secrets_reencrypt`.",
            id="hyphae.W007",
        )
    ]


def unreadable_secrets() -> dict[tuple[str, str], int]:
    """How many extension secrets each (extension, key id) holds that no configured key
    provides. A row's `key_id` names the key that encrypted it: no decryption needed."""
    from django.db.models import Count

    from extensions_host.contributions.models import ExtensionSecret
    from extensions_host.contributions.services.stores import keyring

    _, current, old = keyring()
    rows: Any = (
        ExtensionSecret.objects.exclude(key_id__in=[current, *old])
        .values_list("extension_id", "key_id")
        .annotate(n=Count("id"))
        .order_by("extension_id", "key_id")
    )
    return {(ext, key_id): n for ext, key_id, n in rows}
