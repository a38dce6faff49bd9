"""The stores every extension gets (spec 05), as `ctx.stores`: secrets (encrypted at rest with
key rotation), settings (validated JSON) and per-extension `data`/`cache`/`state` directories.

Secrets: Fernet tokens under a `MultiFernet` whose keys are derived (HKDF-SHA256) from
`HOST_SECRET_KEY` (or `SECRET_KEY`) — the current key first — and `HOST_SECRET_KEYS_OLD`, which
still decrypt. `secrets_reencrypt` (`manage.py secrets_reencrypt`) moves every row to the
current key. Plaintext never goes to the database, the cache, a log or the admin; every value
is also removed from the extension's stop reasons and logged causes (`secret_values`).

Writes inside a frame of the extension join its transaction; outside (routes, workers, jobs)
they commit on their own.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import DatabaseError, transaction
from django.views.decorators.debug import sensitive_variables

from core.errors import HostError
from core.services import audit_record
from core.validation import first_problem, json_problem, model_from_json, text_problem
from extensions_host import registry
from extensions_host.contributions.models import ExtensionSecret, ExtensionSettings
from extensions_host.models import RosterEntry
from extensions_host.runtime import current_frame, require_read, require_write
from extensions_host.sdk import StateError

if TYPE_CHECKING:
    from extensions_host.runtime.context import HookContext

logger = logging.getLogger("extensions_host.contributions.stores")

SECRET_KEY_RE = re.compile(r"\A[A-Za-z0-9_.:-]{1,128}\Z")
SECRET_VALUE_MAX = 64 * 1024
SETTINGS_MAX_BYTES = 64 * 1024
SETTINGS_MAX_DEPTH = 32
PATH_KINDS = ("data", "cache", "state")

MSG_SECRET_KEY = "Secret key must be 1..128 of A-Z a-z 0-9 _ . : -"  # noqa: S105 (a message)
MSG_SECRET_VALUE = f"Secret value must be a string of at most {SECRET_VALUE_MAX} characters"
MSG_SECRET_UNREADABLE = "Secret cannot be decrypted with the configured keys"  # noqa: S105
MSG_SETTINGS_INVALID = "Extension settings are invalid"
MSG_NOT_INSTALLED = "Extension is not in the roster"


# --- keys ------------------------------------------------------------------------------------


def _derive(secret: str) -> bytes:
    """A Fernet key from a configured secret (HKDF-SHA256, purpose-bound salt and info)."""
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=b"hyphae extension secrets",
        info=b"fernet key v1",
    )
    return base64.urlsafe_b64encode(hkdf.derive(secret.encode("utf-8")))


def key_id_of(key: bytes) -> str:
    """A public name for a derived key (a hash prefix; it reveals nothing about the key)."""
    return hashlib.sha256(b"key-id:" + key).hexdigest()[:16]


@lru_cache(maxsize=8)
def _keys(current: str, old: tuple[str, ...]) -> tuple[MultiFernet, str, tuple[str, ...]]:
    primary = _derive(current)
    older = [_derive(secret) for secret in old if secret and secret != current]
    fernet = MultiFernet([Fernet(primary), *(Fernet(k) for k in older)])
    return fernet, key_id_of(primary), tuple(key_id_of(k) for k in older)


def keyring() -> tuple[MultiFernet, str, tuple[str, ...]]:
    """(the MultiFernet, the current key's id, the old keys' ids) from settings."""
    current = settings.HOST_SECRET_KEY or settings.SECRET_KEY
    return _keys(current, tuple(settings.HOST_SECRET_KEYS_OLD))


# error reports (Django's debug page, AdminEmailHandler) never show a secret's value
@sensitive_variables()
def encrypt(value: str) -> tuple[str, str]:
    fernet, current_id, _ = keyring()
    return fernet.encrypt(value.encode("utf-8")).decode("ascii"), current_id


@sensitive_variables()
def decrypt(token: str) -> str:
    fernet, _, _ = keyring()
    try:
        return fernet.decrypt(token.encode("ascii")).decode("utf-8")
    except (InvalidToken, ValueError) as exc:
        raise StateError("unavailable", MSG_SECRET_UNREADABLE) from exc


# --- secrets ---------------------------------------------------------------------------------


def secret_key_check(key: Any) -> str:
    """A secret's key as stored (raises StateError `bound`): 1..128 of `[A-Za-z0-9_.:-]`."""
    if not isinstance(key, str) or not SECRET_KEY_RE.match(key):
        raise StateError("bound", MSG_SECRET_KEY)
    return key


@sensitive_variables()
def secret_value_check(value: Any) -> str:
    """A secret's value as stored (raises StateError `bound`): a string of ≤ 64 KiB the
    database can hold (no NUL, no lone surrogate)."""
    if not isinstance(value, str) or len(value) > SECRET_VALUE_MAX or text_problem(value):
        raise StateError("bound", MSG_SECRET_VALUE)
    return value


@sensitive_variables()
def secret_get(*, extension_id: str, key: str) -> str | None:
    row = (
        ExtensionSecret.objects.filter(extension_id=extension_id, key=secret_key_check(key))
        .only("ciphertext", "key_id")
        .first()
    )
    if row is None:
        return None
    try:
        return decrypt(row.ciphertext)
    except StateError:
        # the caller answers 503; the operator needs to know which key is missing
        logger.error(
            "secret_unreadable",
            extra={
                "extension_id": extension_id,
                "key": key,
                "key_id": row.key_id,
                "fix": "put the key that encrypted it in HOST_SECRET_KEYS_OLD, restart, "
                "run manage.py secrets_reencrypt",
            },
        )
        raise


@sensitive_variables()
def secret_set(*, extension_id: str, key: str, value: str | None) -> None:
    """Store (or, with None, delete) one secret, in the caller's transaction."""
    secret_key_check(key)
    if value is None:
        ExtensionSecret.objects.filter(extension_id=extension_id, key=key).delete()
        return
    secret_value_check(value)
    if not RosterEntry.objects.filter(pk=extension_id).exists():
        raise StateError("unavailable", MSG_NOT_INSTALLED)
    ciphertext, key_id = encrypt(value)
    ExtensionSecret.objects.update_or_create(
        extension_id=extension_id,
        key=key,
        defaults={"ciphertext": ciphertext, "key_id": key_id},
    )


@sensitive_variables()
def secret_edit(*, extension_id: str, key: str, value: str | None, actor: str) -> None:
    """Staff set, replace or (with None) delete a secret (the admin): `secret_set`, audited
    with the key only, never the value.

    Not durable: the admin's forms already run inside their own transaction."""
    with transaction.atomic():
        existed = ExtensionSecret.objects.filter(extension_id=extension_id, key=key).exists()
        secret_set(extension_id=extension_id, key=key, value=value)
        if value is None and not existed:
            return
        audit_record(
            actor=actor,
            action="extension_secret_deleted" if value is None else "extension_secret_set",
            target=extension_id,
            detail={"key": key, "replaced": existed} if value is not None else {"key": key},
        )


def secret_keys(*, extension_id: str) -> list[str]:
    return list(
        ExtensionSecret.objects.filter(extension_id=extension_id).values_list("key", flat=True)
    )


def secret_values(extension_id: str) -> list[str]:
    """Every readable secret value of the extension (the redaction source of stop reasons and
    logged causes). Never raises."""
    try:
        # a savepoint: a failed read must not poison the transaction of the stop it serves
        with transaction.atomic():
            tokens = list(
                ExtensionSecret.objects.filter(extension_id=extension_id).values_list(
                    "ciphertext", flat=True
                )
            )
    except DatabaseError:
        logger.warning("secret values unavailable for redaction of %s", extension_id)
        return []
    values = []
    for token in tokens:
        try:
            values.append(decrypt(token))
        except StateError:
            continue
    return values


def secrets_reencrypt(*, batch: int = 500) -> dict[str, int]:
    """Re-encrypt every secret under the current key (after a rotation). Rows another key
    cannot open are reported, left as they are. Idempotent; runs in batches."""
    fernet, current_id, _ = keyring()
    moved = unreadable = 0
    last = 0
    while True:
        with transaction.atomic(durable=True):
            rows = list(
                ExtensionSecret.objects.select_for_update()
                .filter(pk__gt=last)
                .order_by("pk")[:batch]
            )
            for row in rows:
                last = row.pk
                if row.key_id == current_id:
                    continue
                try:
                    token = fernet.rotate(row.ciphertext.encode("ascii")).decode("ascii")
                except (InvalidToken, ValueError):
                    unreadable += 1
                    continue
                row.ciphertext, row.key_id = token, current_id
                row.save(update_fields=["ciphertext", "key_id", "updated_at"])
                moved += 1
        if len(rows) < batch:
            break
    logger.info(
        "secrets_reencrypted",
        extra={"event": "secrets_reencrypted", "moved": moved, "unreadable": unreadable},
    )
    return {"reencrypted": moved, "unreadable": unreadable}


# --- settings --------------------------------------------------------------------------------


def settings_get(*, extension_id: str) -> dict[str, Any]:
    value = (
        ExtensionSettings.objects.filter(pk=extension_id).values_list("value", flat=True).first()
    )
    return dict(value) if isinstance(value, dict) else {}


def settings_validate(*, extension_id: str, value: Any) -> dict[str, Any]:
    """The settings as they are stored: a JSON object the database can store
    (`core.validation.json_problem`: no NUL, no lone surrogate, finite numbers, string keys,
    nesting ≤ 32), ≤ 64 KiB, and, when the extension declares a `settings_model`, valid by
    `core.validation.model_from_json` (the JSON-input rule commands use: strict types, unknown
    keys refused). Stored as given, not as the model's dump: a dump need not read back as the
    same settings (a `SecretStr` dumps as its mask, a serialization alias under another name),
    and what staff typed stays what they see and can save again. Raises HostError 400
    (`MSG_SETTINGS_INVALID`) with the problems by field."""
    if not isinstance(value, dict):
        raise _settings_invalid("Must be a JSON object.")
    problem = json_problem(value, max_depth=SETTINGS_MAX_DEPTH, max_bytes=SETTINGS_MAX_BYTES)
    if problem is not None:
        raise _settings_invalid(problem)
    loaded = registry.get(extension_id)
    model = loaded.definition.settings_model if loaded is not None else None
    if model is not None:
        model_from_json(model, value, message=MSG_SETTINGS_INVALID)
    return value


def _settings_invalid(message: str) -> HostError:
    return HostError("contract", "invalid", MSG_SETTINGS_INVALID, details={"value": [message]})


def settings_store(*, extension_id: str, value: Any) -> dict[str, Any]:
    """Validate and store the settings in the caller's transaction."""
    checked = settings_validate(extension_id=extension_id, value=value)
    if not RosterEntry.objects.filter(pk=extension_id).exists():
        raise HostError("store", "not_found", MSG_NOT_INSTALLED)
    ExtensionSettings.objects.update_or_create(pk=extension_id, defaults={"value": checked})
    return checked


def settings_edit(*, extension_id: str, value: Any, actor: str) -> dict[str, Any]:
    """Staff edit (the admin): validated, stored and audited (keys only, never values).

    Not durable: the admin's change form already runs inside its own transaction."""
    with transaction.atomic():
        before = settings_get(extension_id=extension_id)
        stored = settings_store(extension_id=extension_id, value=value)
        audit_record(
            actor=actor,
            action="extension_settings_edited",
            target=extension_id,
            detail={"keys_before": sorted(before), "keys_after": sorted(stored)},
        )
    return stored


# --- paths -----------------------------------------------------------------------------------


def extension_paths(*, extension_id: str) -> dict[str, Path]:
    """`HOST_DATA_DIR/<kind>/<extension id>` for data, cache and state (created, 0700)."""
    root = Path(settings.HOST_DATA_DIR)
    paths = {}
    for kind in PATH_KINDS:
        path = root / kind / extension_id
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        paths[kind] = path
    return paths


# --- ctx.stores ------------------------------------------------------------------------------


def _write(ctx: HookContext, fn: Any) -> Any:
    """Inside the extension's own frame: join it (guards apply). Outside any frame: commit on
    its own."""
    if current_frame() is not None:
        require_write(ctx)
        return fn()
    with transaction.atomic(durable=True):
        return fn()


class SecretsHandle:
    """`ctx.stores.secrets`: `get(key) -> str | None`, `set(key, value)`, `delete(key)`."""

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def get(self, key: str) -> str | None:
        require_read(self._ctx)
        return secret_get(extension_id=self._ctx.extension_id, key=key)

    def set(self, key: str, value: str) -> None:
        _write(
            self._ctx,
            lambda: secret_set(extension_id=self._ctx.extension_id, key=key, value=value),
        )

    def delete(self, key: str) -> None:
        _write(
            self._ctx, lambda: secret_set(extension_id=self._ctx.extension_id, key=key, value=None)
        )

    def keys(self) -> list[str]:
        require_read(self._ctx)
        return secret_keys(extension_id=self._ctx.extension_id)


class SettingsHandle:
    """`ctx.stores.settings`: `get() -> dict` (absent reads as `{}`), `set(dict)`."""

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def get(self) -> dict[str, Any]:
        require_read(self._ctx)
        return settings_get(extension_id=self._ctx.extension_id)

    def set(self, value: dict[str, Any]) -> None:
        def store() -> None:
            try:
                settings_store(extension_id=self._ctx.extension_id, value=value)
            except HostError as exc:
                raise StateError("bound", _first_problem(exc)) from exc

        _write(self._ctx, store)


def _first_problem(exc: HostError) -> str:
    """The refusal with its first problem by field (`Extension settings are invalid:
    max_members: Input should be greater than or equal to 1 (and 1 more)`): a `StateError`
    carries a message, where the staff form's 400 has the problems by field."""
    problems = [
        f"{field}: {problem}" for field, found in (exc.details or {}).items() for problem in found
    ]
    if not problems:
        return exc.message
    return f"{exc.message}: {first_problem(problems)}"


class PathsHandle:
    """`ctx.stores.paths.data|cache|state`: the extension's own directories (str)."""

    def __init__(self, ctx: HookContext) -> None:
        self._paths = extension_paths(extension_id=ctx.extension_id)

    @property
    def data(self) -> str:
        return str(self._paths["data"])

    @property
    def cache(self) -> str:
        return str(self._paths["cache"])

    @property
    def state(self) -> str:
        return str(self._paths["state"])


class Stores:
    """`ctx.stores`: needs no grant (spec 05)."""

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx
        self.secrets = SecretsHandle(ctx)
        self.settings = SettingsHandle(ctx)

    @property
    def paths(self) -> PathsHandle:
        return PathsHandle(self._ctx)
