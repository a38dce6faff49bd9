"""Set-based generators of stored volume (`INSERT … SELECT generate_series`): a million timers
or settled runs take seconds, not the hours a row-by-row ORM loop would.

Everything here writes straight to the bench database; nothing goes through the host's rules,
so callers only generate what those rules would have produced (valid statuses, gap-free
settled sequences with the counter moved past them, one consumed input per run).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import connection, transaction

INPUT_TEXT = '[{"type": "text", "text": "bench input"}]'


def _table(model: type) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def bench_owner_id() -> int:
    user, _ = get_user_model().objects.get_or_create(
        username="bench-owner", defaults={"first_name": "Bench"}
    )
    return int(user.pk)


def timers_insert(
    *, extension_id: str, prefix: str, count: int, first_due_ms: int, spacing_ms: float = 0.0
) -> int:
    """`count` timers `<prefix><n>` of one extension, the n-th due at
    `first_due_ms + n * spacing_ms`."""
    from extensions_host.background.models import Timer

    sql = (
        f"INSERT INTO {_table(Timer)} (extension_id, key, due_at, fire_at, retry_attempt) "
        "SELECT %s, %s || g, %s + floor(g * %s)::bigint, %s + floor(g * %s)::bigint, 0 "
        "FROM generate_series(0, %s - 1) AS g"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            sql, [extension_id, prefix, first_due_ms, spacing_ms, first_due_ms, spacing_ms, count]
        )
        return cursor.rowcount


def timers_count(*, extension_id: str | None = None, key_prefix: str = "") -> int:
    from extensions_host.background.models import Timer

    rows = Timer.objects.all()
    if extension_id is not None:
        rows = rows.filter(extension_id=extension_id)
    if key_prefix:
        rows = rows.filter(key__startswith=key_prefix)
    return rows.count()


def conversations_insert(*, prefix: str, count: int) -> list[str]:
    """`count` conversations `<prefix><n>` owned by the bench owner."""
    from conversations.models import Conversation

    owner = bench_owner_id()
    sql = (
        f"INSERT INTO {_table(Conversation)} (id, created_at, updated_at, sharing, name, source, "
        "archived, last_activity_at, version, owner_id) "
        "SELECT %s || g, now(), now(), 'private', '', 'bench', false, now(), 0, %s "
        "FROM generate_series(0, %s - 1) AS g ON CONFLICT (id) DO NOTHING"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [prefix, owner, count])
    return [f"{prefix}{n}" for n in range(count)]


@dataclass(frozen=True)
class SettledRange:
    first: int  # first settled sequence generated
    last: int  # last one (the core cursor after the insert)


def settled_runs_insert(
    *, conversation_prefix: str, conversations: int, count: int, reason: str = "bench"
) -> SettledRange:
    """`count` settled runs (unanswered, one consumed input each) spread over the
    conversations `<prefix>0 …`, taking the next settled sequences and moving the counter past
    them, all in one transaction (the counter row lock keeps real settlements out meanwhile)."""
    from conversations.models import Entry, Run, SettledCounter, Submission

    run, sub, entry, counter = (
        _table(Run),
        _table(Submission),
        _table(Entry),
        _table(SettledCounter),
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {counter} (id, value) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
        )
        cursor.execute(f"SELECT value FROM {counter} WHERE id = 1 FOR UPDATE")
        top = int(cursor.fetchone()[0])
        cursor.execute(
            f"INSERT INTO {run} (created_at, updated_at, status, claimed_at, lease_expires_at, "
            "settled_at, outcome, reason, settled_sequence, capture, conversation_id) "
            "SELECT now(), now(), 'settled', now(), now(), now(), 'unanswered', %s, %s + g, "
            "'{}'::jsonb, %s || (g %% %s) FROM generate_series(1, %s) AS g",
            [reason, top, conversation_prefix, conversations, count],
        )
        cursor.execute(
            f"INSERT INTO {sub} (created_at, updated_at, request_id, parts, delivery, "
            "origin_kind, origin_extension_id, correlation, fingerprint, status, release_count, "
            "conversation_id, run_id) "
            "SELECT now(), now(), 'bench-' || r.id, %s::jsonb, 'follow_up', 'user', '', '', "
            "md5(r.id::text), 'consumed', 0, r.conversation_id, r.id "
            f"FROM {run} r WHERE r.settled_sequence > %s",
            [INPUT_TEXT, top],
        )
        cursor.execute(
            f"INSERT INTO {entry} (role, content, withdrawn, created_at, conversation_id, "
            "submission_id) "
            "SELECT 'user', s.parts, false, now(), s.conversation_id, s.id "
            f"FROM {sub} s JOIN {run} r ON r.id = s.run_id WHERE r.settled_sequence > %s",
            [top],
        )
        cursor.execute(f"UPDATE {counter} SET value = %s WHERE id = 1", [top + count])
    return SettledRange(first=top + 1, last=top + count)


def claimed_runs_insert(*, conversation_prefix: str, count: int) -> list[int]:
    """`count` claimed runs, one per new conversation `<prefix><n>`, each with one claimed
    input (what a runtime's claim leaves behind), ready for `run_settle`."""
    from conversations.models import Entry, Run, Submission

    conversations_insert(prefix=conversation_prefix, count=count)
    run, sub, entry = _table(Run), _table(Submission), _table(Entry)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {run} (created_at, updated_at, status, claimed_at, lease_expires_at, "
            "outcome, reason, capture, conversation_id) "
            "SELECT now(), now(), 'claimed', now(), now() + interval '1 day', '', '', "
            "'{}'::jsonb, %s || g FROM generate_series(0, %s - 1) AS g RETURNING id",
            [conversation_prefix, count],
        )
        ids = sorted(row[0] for row in cursor.fetchall())
        cursor.execute(
            f"INSERT INTO {sub} (created_at, updated_at, request_id, parts, delivery, "
            "origin_kind, origin_extension_id, correlation, fingerprint, status, release_count, "
            "conversation_id, run_id) "
            "SELECT now(), now(), 'bench-' || r.id, %s::jsonb, 'follow_up', 'user', '', '', "
            "md5(r.id::text), 'claimed', 0, r.conversation_id, r.id "
            f"FROM {run} r WHERE r.id = ANY(%s)",
            [INPUT_TEXT, ids],
        )
        cursor.execute(
            f"INSERT INTO {entry} (role, content, withdrawn, created_at, conversation_id, "
            "submission_id) "
            "SELECT 'user', s.parts, false, now(), s.conversation_id, s.id "
            f"FROM {sub} s WHERE s.run_id = ANY(%s)",
            [ids],
        )
    return ids


def settled_cursors_set(*, extension_ids: list[str], position: int) -> None:
    """Put every consumer's cursor at `position`. Missing cursors are created by the service
    (`settled_cursor_initialise`, which also creates the consumer's delivery kick row)."""
    from extensions_host.background.models import SettledCursor
    from extensions_host.background.services.settled import settled_cursor_initialise

    with transaction.atomic():
        for extension_id in extension_ids:
            settled_cursor_initialise(extension_id=extension_id)
        SettledCursor.objects.filter(pk__in=extension_ids).update(
            position=position, retry_attempt=0, not_before=None
        )


def settled_positions(*, extension_ids: list[str]) -> dict[str, int]:
    from extensions_host.background.models import SettledCursor

    return dict(
        SettledCursor.objects.filter(pk__in=extension_ids).values_list("extension_id", "position")
    )


def analyze() -> None:
    """Fresh planner statistics after a bulk insert (what autovacuum would do soon anyway)."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
