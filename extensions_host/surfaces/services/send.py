"""`ctx.send`: an extension admits a prompt into a conversation (spec 04, Send).

There is ONE admission implementation, `conversations.services.submission_admit`; this module
only adds what is particular to extensions (the grant, the origin, the per-extension rate
limit, create-on-demand, the typed results) and runs it in the caller's frame, so the
submission commits or rolls back with the hook.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from pydantic import ValidationError

from conversations.models import Conversation
from conversations.services import (
    ConversationBusy,
    Origin,
    conversation_ensure,
    submission_admit,
)
from core import clock
from core.errors import HostError
from extensions_host.runtime.context import not_granted
from extensions_host.sdk import AdmissionError
from extensions_host.services.roster import extension_user, service_source
from extensions_host.surfaces.rates import parse_rate
from extensions_host.surfaces.services.common import conversation_id_valid
from extensions_host.surfaces.types import (
    CORRELATION_MAX,
    Accepted,
    NotReady,
    Prompt,
)

MSG_THROTTLED = "Extension send rate is exceeded"
MSG_PROMPT_INVALID = "Extension prompt to send is invalid"
MSG_WHEN_INVALID = "Send instant must be epoch milliseconds"
MSG_WHEN_BUSY_INVALID = "Send when_busy must be queue, steer or reject"
MSG_CORRELATION_INVALID = "Send correlation must be a string of at most 256 characters"
MSG_CONVERSATION_ID_INVALID = "Conversation id is invalid"
MSG_CONVERSATION_MISSING = "Conversation does not exist"

WHEN_BUSY = ("queue", "steer", "reject")


@contextmanager
def send_rate(*, extension_id: str) -> Iterator[None]:
    """Per-extension fixed-window rate limit (`HOST_SEND_RATE`) around one send, submission or
    conversation creation, counted in the shared cache: over it, `AdmissionError(throttled)`
    before any work. What the body refuses (raises) is not counted; what it admits is, even
    when its frame rolls back later.

    The count is approximate by design (a cache, not the database: a rate limit must never
    serialise an extension's frames on one row); frames sending at the same instant may
    overshoot it by as many as run at once.
    """
    rate = parse_rate(settings.HOST_SEND_RATE)
    if rate is None:
        yield
        return
    limit, period = rate
    window = clock.now_ms() // (period * 1000)
    key = f"hyphae:send-rate:{extension_id}:{window}"
    if (cache.get(key) or 0) >= limit:
        raise AdmissionError("throttled", MSG_THROTTLED)
    yield
    cache.add(key, 0, timeout=period * 2)
    try:
        cache.incr(key)
    except ValueError:  # evicted between add and incr
        cache.set(key, 1, timeout=period * 2)


def send_admit(
    *,
    extension_id: str,
    grants: frozenset[str],
    conversation_id: str,
    prompt: Any,
    when: Any = None,
    when_busy: str = "queue",
    correlation: Any = None,
    require_existing_conversation: bool = False,
) -> Accepted | NotReady:
    """Admit `prompt` into the conversation with origin `{extension, extension_id,
    correlation}`, in the caller's transaction (the frame).

    Results: `Accepted(submission_id, delivery)`; `NotReady()` when the conversation is busy and
    `when_busy="reject"`. Errors (`AdmissionError`): not granted → closed; bad arguments or a
    missing conversation with `require_existing_conversation` → invalid; the request id reused
    with different content → conflict; an archived conversation → closed; over the rate →
    throttled.
    """
    if "send" not in grants:
        raise not_granted("send")
    checked = _prompt(prompt)
    if when is not None and (
        isinstance(when, bool) or not isinstance(when, int) or not 0 <= when <= clock.MAX_MS
    ):
        raise AdmissionError("invalid", MSG_WHEN_INVALID)
    if when_busy not in WHEN_BUSY:
        raise AdmissionError("invalid", MSG_WHEN_BUSY_INVALID)
    if correlation is not None and (
        not isinstance(correlation, str) or len(correlation) > CORRELATION_MAX
    ):
        raise AdmissionError("invalid", MSG_CORRELATION_INVALID)
    if not conversation_id_valid(conversation_id):
        raise AdmissionError("invalid", MSG_CONVERSATION_ID_INVALID)
    try:
        # a savepoint: a refused send leaves nothing behind (not even a created conversation),
        # while the hook may catch the error and go on in its frame
        with send_rate(extension_id=extension_id), transaction.atomic():
            if not Conversation.objects.filter(pk=conversation_id).exists():
                if require_existing_conversation:
                    raise AdmissionError("invalid", MSG_CONVERSATION_MISSING)
                conversation_ensure(
                    owner=extension_user(extension_id),
                    conversation_id=conversation_id,
                    source=service_source(extension_id),
                )
            admission = submission_admit(
                conversation_id=conversation_id,
                parts=[{"type": "text", "text": checked.text}],
                origin=Origin.of_extension(extension_id, correlation or ""),
                request_id=checked.request_id,
                delivery=checked.delivery,
                when_busy=when_busy,
                not_before=clock.from_ms(when) if when is not None else None,
            )
    except ConversationBusy:
        return NotReady()
    except HostError as exc:
        raise _admission_error(exc) from exc
    return Accepted(
        submission_id=admission.submission.pk,
        delivery=admission.submission.delivery,
        created=admission.created,
    )


def _prompt(prompt: Any) -> Prompt:
    if isinstance(prompt, Prompt):
        return prompt
    try:
        return Prompt.model_validate(prompt)
    except ValidationError as exc:
        raise AdmissionError("invalid", MSG_PROMPT_INVALID) from exc


def _admission_error(exc: HostError) -> AdmissionError:
    if exc.cause == "conflict":
        return AdmissionError("conflict", exc.message)
    if exc.cause == "closed":
        return AdmissionError("closed", exc.message)
    return AdmissionError("invalid", exc.message)
