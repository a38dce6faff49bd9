"""The roster: sync with the installed extensions, the one eligibility rule, admission of
grants, staff limits (auto-resume, deadline, quotas), the extension's own user, resume and
auto-resume (spec 02 §2, §3, §7)."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, OperationalError, ProgrammingError, connection, transaction

from core import clock
from core.auth import EXTENSION_USERNAME_PREFIX
from core.errors import MSG_NOT_FOUND, HostError
from core.services import audit_record
from extensions_host import registry
from extensions_host.models import ExtensionStatus, RosterEntry, RosterSyncLock
from extensions_host.registry import LoadedExtension
from extensions_host.runtime.deadlines import MAX_DEADLINE_SECONDS
from extensions_host.runtime.roster_rows import decode_json
from extensions_host.runtime.stops import bounded_reason, extension_stop
from extensions_host.runtime.transient import with_transient_retries
from extensions_host.selectors import extension_id_usable
from extensions_host.services.documents import documents_declare
from extensions_host.services.migrations import state_migrate
from extensions_host.services.quotas import quotas_parsed, quotas_problems, usage_slots_ensure
from extensions_host.services.recovery import auto_resume_next_at

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger("extensions_host.roster")

MSG_UNINSTALLED = "Extension is uninstalled"
MSG_NOT_UNINSTALLED = "Only an uninstalled extension's data can be purged"
MSG_GRANTS_NOT_REQUESTED = "Admitted grants must be a subset of the requested grants"
MSG_AUTO_RESUME_INVALID = "Auto-resume must be true or false"
MSG_DEADLINE_INVALID = "Deadline override must be more than 0 and at most 300 seconds"
MSG_QUOTAS_INVALID = "Quota overrides are invalid"

# Called after a resume commits, with the extension id (timer wake, attention, …).
resume_listeners: list[Callable[[str], None]] = []
# Called inside the transaction of a resume or of a new revision, with the extension id: a
# fresh start for what the stop left behind (every pending item's `Retry` count, spec 02 §7).
fresh_start_steps: list[Callable[[str], None]] = []
# Called after the commit that changed an extension's admitted grants (staff admission, or a
# sync that dropped a grant no longer requested), with the extension id: what a grant gates
# may have appeared or vanished (attention items, ambient surfaces).
grant_listeners: list[Callable[[str], None]] = []


@dataclass
class SyncReport:
    installed: list[str] = field(default_factory=list)
    new_revision: list[str] = field(default_factory=list)
    kept_stopped: list[str] = field(default_factory=list)
    stopped: dict[str, str] = field(default_factory=dict)
    uninstalled: list[str] = field(default_factory=list)


def service_username(extension_id: str) -> str:
    return f"{EXTENSION_USERNAME_PREFIX}{extension_id}"


def service_source(extension_id: str) -> str:
    """The `source` of a conversation an extension creates without naming one: `ext:<id>`
    (spec 04), cut to the 64 characters a source holds (spec 01; ids run to 63 characters, and
    `conversation_ensure` refuses a longer source rather than cutting it)."""
    return service_username(extension_id)[:64]


def settled_consumer_cursor_initialise(*, extension_id: str) -> None:
    """A `settled` consumer with no cursor yet gets one at the current core cursor
    (`conversations.models.SettledCounter.value`), so a new consumer does not replay all
    history and a resumed one replays exactly what it missed (spec 02 §2 step 2).

    Runs inside `roster_sync`'s transaction; the cursor table belongs to background delivery.
    """
    from extensions_host.background.services.settled import settled_cursor_initialise

    settled_cursor_initialise(extension_id=extension_id)


def eligible_ids(grant: str, *, ids: Iterable[str] | None = None) -> list[str]:
    """The one rule of which extensions' code for `grant` may run in this process: running,
    `grant` admitted, and loaded here at the roster's revision (a process with other code runs
    none of their hooks). Sorted ids, among `ids` when given.

    A plain statement: every background sweep page runs it."""
    return list(eligible_deadlines(grant, ids=ids))


def eligible_deadlines(grant: str, *, ids: Iterable[str] | None = None) -> dict[str, float | None]:
    """`eligible_ids` (in the same order), each with its row's staff deadline override
    (`deadline_seconds`; None when unset), read at one moment in the same one statement: the
    timer sweep groups its extensions by their hook's deadline with it."""
    loaded = registry.loaded()
    wanted = list(loaded) if ids is None else [i for i in ids if i in loaded]
    if not wanted:
        return {}
    roster = connection.ops.quote_name(RosterEntry._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, revision, admitted_grants, deadline_seconds FROM {roster} "  # noqa: S608
            f"WHERE status = %s AND id IN ({', '.join(['%s'] * len(wanted))})",
            [ExtensionStatus.RUNNING.value, *wanted],
        )
        rows = cursor.fetchall()
    return {
        ext_id: override
        for ext_id, revision, grants, override in sorted(rows)
        if grant in (decode_json(grants) or []) and loaded[ext_id].revision == revision
    }


def extensions_running_with(grant: str) -> list[tuple[str, LoadedExtension]]:
    """The loaded extensions whose contributions of a kind apply now (`eligible_ids` for the
    kind's grant), in load order."""
    eligible = set(eligible_ids(grant))
    return [
        (extension_id, loaded)
        for extension_id, loaded in registry.loaded().items()
        if extension_id in eligible
    ]


def roster_sync(*, extensions: dict[str, LoadedExtension] | None = None) -> SyncReport:
    """Bring the roster in line with the installed extensions (`manage.py sync_roster`).

    Serialised cluster-wide by a row lock; safe from many processes at once. Never run from
    `AppConfig.ready`.
    """
    installed = registry.loaded() if extensions is None else extensions

    def sync() -> SyncReport:
        report = SyncReport()
        with transaction.atomic(durable=True):
            RosterSyncLock.objects.bulk_create([RosterSyncLock(id=1)], ignore_conflicts=True)
            RosterSyncLock.objects.select_for_update().get(id=1)
            for loaded in installed.values():
                _sync_one(loaded, report)
            gone = (
                RosterEntry.objects.select_for_update()
                .exclude(pk__in=list(installed))
                .exclude(status=ExtensionStatus.UNINSTALLED)
            )
            for row in gone:
                # None of its hooks run; its data is kept until staff purge it. A stop is kept
                # too (reason, `stopped_at`, restart count and auto-resume schedule; the sweep
                # resumes only `stopped` rows): a reinstall at the same revision is stopped again.
                row.status = ExtensionStatus.UNINSTALLED
                row.save(update_fields=["status", "updated_at"])
                report.uninstalled.append(row.id)
        return report

    report = with_transient_retries(sync)
    logger.info("roster_synced", extra={"event": "roster_synced", **report.__dict__})
    return report


def roster_sync_at_start() -> SyncReport | None:
    """The per-process startup sync (gunicorn, uvicorn and Celery worker processes alike).

    A process starts whatever state the database is in: without tables (before `migrate`) or
    unreachable (an outage; `with_transient_retries` has given up, `store/unavailable`), the
    sync is skipped with a warning naming the database, and the process serves 503s until it
    is back. Nothing re-runs the skipped sync in this process: the roster is brought in line
    by the deploy's `manage.py sync_roster` and by every later process start (until then this
    process runs the hooks of the extensions whose revision the roster already has, spec 02
    §2 mixed versions). Load errors of the installed set, and any other error, still raise."""
    try:
        return roster_sync()
    except (ProgrammingError, OperationalError, HostError) as exc:
        if isinstance(exc, HostError) and (exc.category, exc.cause) != ("store", "unavailable"):
            raise
        cause = exc.__cause__ if isinstance(exc, HostError) and exc.__cause__ else exc
        logger.warning(
            "database not ready at start (unreachable, or not migrated): roster sync skipped, "
            "it runs again with `manage.py sync_roster` or the next process start: %s",
            str(cause).strip() or type(cause).__name__,
            extra={"event": "roster_sync_skipped"},
        )
        return None


def _sync_one(loaded: LoadedExtension, report: SyncReport) -> None:
    definition = loaded.definition
    requested = sorted(definition.grants)
    auto_admit = settings.HOST_AUTO_ADMIT
    row = RosterEntry.objects.select_for_update().filter(pk=loaded.id).first()
    if row is None:
        row = RosterEntry(
            id=loaded.id,
            version=definition.version,
            revision=loaded.revision,
            fingerprint=loaded.fingerprint,
            requested_grants=requested,
            admitted_grants=requested if auto_admit else [],
            status=ExtensionStatus.RUNNING,
            declared_auto_resume=definition.auto_resume,
        )
        row.save(force_insert=True)
        report.installed.append(row.id)
    else:
        if row.revision != loaded.revision:
            # an upgrade is a fresh chance: running, auto-resume counters reset
            report.new_revision.append(row.id)
            _clear_stop(row)
            _fresh_start(row.id)
            row.restart_count = 0
            row.activation_epoch += 1
        elif row.status == ExtensionStatus.UNINSTALLED:
            # A reinstall at the same revision is the same code: a stop it had is kept (every
            # process syncs at start, so a process or a rollback without it must not resume
            # it), with its restart count and auto-resume schedule.
            if row.stopped_at is None:
                row.status = ExtensionStatus.RUNNING
                row.activation_epoch += 1
            else:
                row.status = ExtensionStatus.STOPPED
        if row.status == ExtensionStatus.STOPPED:
            report.kept_stopped.append(row.id)
        # re-read at every sync, apart from staff's switch (`auto_resume`): both must allow it
        if row.declared_auto_resume != definition.auto_resume:
            row.declared_auto_resume = definition.auto_resume
            _schedule_auto_resume(row)
        row.version = definition.version
        row.revision = loaded.revision
        row.fingerprint = loaded.fingerprint
        # Auto-admission admits only grants newly requested since the last sync: every process
        # syncs at start, so admitting all requested grants here would undo a staff revocation.
        admitted = set(row.admitted_grants) & set(requested)
        if auto_admit:
            admitted |= set(requested) - set(row.requested_grants or [])
        row.requested_grants = requested
        if sorted(admitted) != sorted(row.admitted_grants):
            _grants_changed(row.id)
        row.admitted_grants = sorted(admitted)
    if "settled" in row.admitted_grants:
        settled_consumer_cursor_initialise(extension_id=row.id)
    usage_slots_ensure(extension_id=row.id)
    extension_user(row.id)
    # one made active before it was created inactive (or reactivated by staff): no login
    get_user_model().objects.filter(username=service_username(row.id), is_active=True).update(
        is_active=False
    )
    stop_reason = state_migrate(loaded=loaded, row=row)
    if stop_reason is not None and row.status == ExtensionStatus.STOPPED:
        # kept stopped, and its state still cannot open: that is the reason now
        row.reason = row.last_error = bounded_reason(stop_reason, row.id)
        row.failing_hook = "migration"
    row.save()
    documents_declare(extension_id=row.id, documents=definition.documents)
    if stop_reason is not None:
        stop = extension_stop(
            extension_id=row.id,
            hook="migration",
            reason=stop_reason,
            revision=loaded.revision,
            enclosing=True,
        )
        report.stopped[row.id] = stop.reason


def _locked(extension_id: str) -> RosterEntry:
    """The roster row, locked for the rest of the transaction; `not_found` without a query for
    an id no extension could have."""
    row = None
    if extension_id_usable(extension_id):
        row = RosterEntry.objects.select_for_update().filter(pk=extension_id).first()
    if row is None:
        raise HostError("store", "not_found", MSG_NOT_FOUND)
    return row


def _clear_stop(row: RosterEntry) -> None:
    row.status = ExtensionStatus.RUNNING
    row.reason = ""
    row.stopped_at = None
    row.failing_hook = ""
    row.next_auto_resume_at = None


def _schedule_auto_resume(row: RosterEntry) -> None:
    """Schedule (or unschedule) a kept stop's auto-resume after either switch changed: off,
    nothing is shown as due; on again, it is due where its backoff from `stopped_at` puts it
    (at the next sweep if that has passed)."""
    if row.stopped_at is not None:
        row.next_auto_resume_at = auto_resume_next_at(row=row, stopped_at=row.stopped_at)


def _fresh_start(extension_id: str) -> None:
    for step in fresh_start_steps:
        step(extension_id)


def extension_user(extension_id: str) -> AbstractBaseUser:
    """The extension's own user `ext:<id>` (no password, no login): the owner of the
    conversations it creates and who its host API calls act as by default. `roster_sync`
    creates it; it is created here too when an older roster predates it.

    No method signs it in: it is inactive with an unusable password (Django's login and the
    admin refuse it) and every authentication class refuses its namespace
    (`core.auth.sign_in_refused`)."""
    user_model = get_user_model()
    username = service_username(extension_id)
    user = user_model.objects.filter(username=username).first()
    if user is not None:
        return user
    user = user_model(
        username=username, first_name=f"Extension {extension_id}"[:150], is_active=False
    )
    user.set_unusable_password()
    try:
        # a savepoint: losing a race to create it must not break the caller's transaction
        with transaction.atomic():
            user.save()
    except IntegrityError:
        return user_model.objects.get(username=username)
    return user


def extension_resume(*, extension_id: str, actor: str) -> RosterEntry:
    """Staff resume (admin action, API, `manage.py resume_extension`): only from `stopped`;
    resets the auto-resume counters. Resume of a running extension is a no-op."""

    def step() -> RosterEntry:
        with transaction.atomic(durable=True):
            row = _locked(extension_id)
            if row.status == ExtensionStatus.UNINSTALLED:
                raise HostError("contract", "conflict", MSG_UNINSTALLED)
            if row.status == ExtensionStatus.STOPPED:
                _resume_row(row, actor=actor, staff=True)
            return row

    return with_transient_retries(step)


def roster_auto_resume_due(*, limit: int = 64) -> list[str]:
    """The auto-resume sweep: resume stopped extensions whose backoff has passed (beat, every
    30 s). Rows locked by another sweep are skipped. Nothing resumes while `HOST_AUTO_RESUME`
    is off, auto-resumes scheduled before it was turned off included; turned on again, those
    still due resume at the next sweep."""
    if not settings.HOST_AUTO_RESUME:
        return []

    def step() -> list[str]:
        now = clock.now()
        resumed: list[str] = []
        with transaction.atomic(durable=True):
            due = (
                RosterEntry.objects.select_for_update(skip_locked=True)
                .filter(
                    status=ExtensionStatus.STOPPED,
                    auto_resume=True,
                    declared_auto_resume=True,
                    next_auto_resume_at__lte=now,
                )
                .order_by("next_auto_resume_at", "id")[:limit]
            )
            for row in due:
                if _resume_row(row, actor="auto-resume", staff=False):
                    resumed.append(row.id)
        return resumed

    return with_transient_retries(step)


def _resume_row(row: RosterEntry, *, actor: str, staff: bool) -> bool:
    """Resume a locked, stopped row. Returns False when its state still cannot open (the
    migration failed again, or stored state is newer): it stays stopped with that reason."""
    loaded = registry.get(row.id)
    if loaded is not None and loaded.revision == row.revision:
        reason = state_migrate(loaded=loaded, row=row)
        if reason is not None:
            row.reason = row.last_error = bounded_reason(reason, row.id)
            row.failing_hook = "migration"
            row.next_auto_resume_at = None
            row.save()
            return False
    previous_reason = row.reason
    _clear_stop(row)
    _fresh_start(row.id)
    row.activation_epoch += 1
    row.restart_count = 0 if staff else row.restart_count + 1
    row.save()
    audit_record(
        actor=actor,
        action="extension_resumed" if staff else "extension_auto_resumed",
        target=row.id,
        detail={"previous_reason": previous_reason, "restart_count": row.restart_count},
    )
    extension_id = row.id
    transaction.on_commit(lambda: [listener(extension_id) for listener in resume_listeners])
    return True


def extension_admit_grants(*, extension_id: str, grants: list[str], actor: str) -> RosterEntry:
    """Staff admit a subset of the requested grants (the admin's admission action)."""
    with transaction.atomic(durable=True):
        row = _locked(extension_id)
        if not set(grants) <= set(row.requested_grants):
            raise HostError("contract", "invalid", MSG_GRANTS_NOT_REQUESTED)
        previous = row.admitted_grants
        row.admitted_grants = sorted(set(grants))
        row.save(update_fields=["admitted_grants", "updated_at"])
        if row.admitted_grants != sorted(previous):
            _grants_changed(row.id)
        audit_record(
            actor=actor,
            action="extension_grants_admitted",
            target=row.id,
            detail={"before": previous, "after": row.admitted_grants},
        )
    return row


class _Keep(enum.Enum):
    KEEP = "keep"


KEEP = _Keep.KEEP  # an argument of `extension_limits_update` left as it is


def extension_limits_update(
    *,
    extension_id: str,
    actor: str,
    auto_resume: bool | _Keep = KEEP,
    deadline_seconds: float | None | _Keep = KEEP,
    quotas: dict[str, int] | None | _Keep = KEEP,
) -> RosterEntry:
    """Staff change an extension's auto-resume switch, hook deadline override (None: none) or
    quota overrides (None or `{}`: none) — the admin's form. Validated like the form; audited
    (`extension_limits_changed`) with each changed field's before and after; a call that
    changes nothing writes nothing."""
    wanted: dict[str, Any] = {}
    if auto_resume is not KEEP:
        if not isinstance(auto_resume, bool):
            raise HostError("contract", "invalid", MSG_AUTO_RESUME_INVALID)
        wanted["auto_resume"] = auto_resume
    if deadline_seconds is not KEEP:
        if deadline_seconds is not None and (
            isinstance(deadline_seconds, bool)
            or not isinstance(deadline_seconds, int | float)
            or not 0 < deadline_seconds <= MAX_DEADLINE_SECONDS
        ):
            raise HostError("contract", "invalid", MSG_DEADLINE_INVALID)
        wanted["deadline_seconds"] = None if deadline_seconds is None else float(deadline_seconds)
    if quotas is not KEEP:
        problems = quotas_problems(quotas)
        if problems:
            raise HostError("contract", "invalid", MSG_QUOTAS_INVALID, details={"quotas": problems})
        wanted["quotas"] = quotas_parsed(quotas)

    def step() -> RosterEntry:
        with transaction.atomic(durable=True):
            row = _locked(extension_id)
            changed = {
                name: {"before": getattr(row, name), "after": value}
                for name, value in wanted.items()
                if getattr(row, name) != value
            }
            if not changed:
                return row
            for name, change in changed.items():
                setattr(row, name, change["after"])
            fields = [*changed, "updated_at"]
            if "auto_resume" in changed:
                _schedule_auto_resume(row)
                fields.append("next_auto_resume_at")
            row.save(update_fields=fields)
            audit_record(
                actor=actor, action="extension_limits_changed", target=row.id, detail=changed
            )
            return row

    return with_transient_retries(step)


def _grants_changed(extension_id: str) -> None:
    transaction.on_commit(lambda: [listener(extension_id) for listener in grant_listeners])


def extension_purge(*, extension_id: str, actor: str) -> dict[str, int]:
    """Delete an uninstalled extension's data and roster row (staff, with confirmation in the
    admin; audited with what was removed). Installed extensions cannot be purged."""
    with transaction.atomic(durable=True):
        row = _locked(extension_id)
        if row.status != ExtensionStatus.UNINSTALLED:
            raise HostError("contract", "conflict", MSG_NOT_UNINSTALLED)
        removed = {
            "records": row.records.count(),
            "documents": row.documents.count(),
        }
        from extensions_host.background.services.purge import extension_background_purge

        removed |= extension_background_purge(extension_id=extension_id)
        row.delete()  # cascades to records, documents, declarations and usage
        audit_record(actor=actor, action="extension_purged", target=extension_id, detail=removed)
    return removed
