"""The host API extensions call (spec 05), as `ctx.host`: conversations (create, submit, list,
meta, watch), users, access, identity, and the interaction/ambient surfaces.

Every call is gated by its grant — create/submit need `send`; list/meta/watch, users, access
and identity need `host`; interactions and ambient need `attention` — raising
`AdmissionError(closed, "Extension is not granted <grant>")` without it. Calls run the same
services as the HTTP API (no second implementation) and are attributed to the extension in the
audit log (`ext:<id>`). Extensions are trusted in-process code: they may act for any user.

Inside the extension's own frame, writes join the frame's transaction (the non-durable service
variants); outside (routes, slash commands, workers, jobs) they use the API's entry points, and
each interaction or ambient write runs in a host-owned transaction of its own.
`watch` blocks, so it refuses to run inside a frame; inside a deadline-bounded call (a route, a
slash command, a worker run) it ends a margin before that deadline
(`deadlines.seconds_left_nested`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from conversations import selectors as conversation_selectors
from conversations.models import Conversation, Sharing, conversation_id_valid
from conversations.serializers import ConversationSerializer, SubmissionSerializer
from conversations.services import (
    ConversationBusy,
    Origin,
    conversation_create,
    conversation_ensure,
    submission_admit,
    submission_submit,
)
from core.access import access_of
from core.auth import Principal, user_principal, username_valid
from core.errors import HostError
from core.services import HOST_CALL_ACTION_PREFIX, audit_record
from core.validation import text_problem
from extensions_host.runtime import current_frame, deadlines
from extensions_host.runtime.context import not_granted
from extensions_host.sdk import AdmissionError, Caller, NotReady, StateError
from extensions_host.services.roster import extension_user, service_source, service_username

if TYPE_CHECKING:
    from extensions_host.runtime.context import HookContext

MSG_USER_UNKNOWN = "User not found"
MSG_WATCH_IN_FRAME = "watch cannot run inside a transaction; call it from a worker or route"
MSG_LIST_LIMIT = "List limit must be 1..1000"
MSG_TIMEOUT = "watch timeout must be in (0, 300] seconds"
MSG_SINCE_VERSION = "watch since_version must be an integer"
WATCH_MAX_SECONDS = 300.0
LIST_MAX = 1000


def _admission(exc: HostError) -> AdmissionError:
    """The host API speaks the SDK's vocabulary: service refusals become AdmissionError."""
    kind = {"conflict": "conflict", "closed": "closed", "throttled": "throttled"}.get(
        exc.cause, "invalid"
    )
    return AdmissionError(kind, exc.message)  # type: ignore[arg-type]


class _Area:
    grant = "host"

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def _grants(self) -> frozenset[str]:
        frame = current_frame()
        if frame is not None and frame.extension_id == self._ctx.extension_id:
            return frame.grants
        return self._ctx.grants

    def _require(self, grant: str) -> None:
        if grant not in self._grants():
            raise not_granted(grant)

    def _audit(self, action: str, target: Any = "", **detail: Any) -> None:
        audit_record(
            actor=service_username(self._ctx.extension_id),
            action=f"{HOST_CALL_ACTION_PREFIX}{action}",
            target=_storable(target),
            detail=detail,
        )

    def _principal(self, user: Any) -> Principal:
        """Who the call acts as: `user` with full access (trusted in-process code)."""
        base = user_principal(user, "extension")
        return Principal(
            user=base.user,
            name=base.name,
            email=base.email,
            admin=True,
            service=False,
            method="extension",
        )

    def _user(self, username: Any) -> Any:
        if not username_valid(username):
            raise AdmissionError("invalid", MSG_USER_UNKNOWN)
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise AdmissionError("invalid", MSG_USER_UNKNOWN)
        return user


class HostConversations(_Area):
    """`ctx.host.conversations`."""

    def _rated(self) -> AbstractContextManager[None]:
        # the one per-extension rate limit of `send` bounds creation too (HOST_SEND_RATE)
        from extensions_host.surfaces.services.send import send_rate

        return send_rate(extension_id=self._ctx.extension_id)

    def _in_own_frame(self) -> bool:
        from extensions_host.runtime import require_write

        frame = current_frame()
        if frame is None:
            return False
        require_write(self._ctx, capability="send")
        return True

    def create(
        self,
        *,
        owner: str | None = None,
        sharing: str = Sharing.PRIVATE,
        name: str = "",
        source: str = "",
        id: str | None = None,
    ) -> str:
        """Create a conversation owned by `owner` (a username; default the extension's own
        user); returns its id. Idempotent on a chosen `id` for the same owner."""
        self._require("send")
        user = self._user(owner) if owner is not None else extension_user(self._ctx.extension_id)
        source = source or service_source(self._ctx.extension_id)
        try:
            with self._rated():
                if self._in_own_frame():
                    with transaction.atomic():
                        created = conversation_ensure(
                            owner=user,
                            conversation_id=id,
                            name=name,
                            sharing=sharing,
                            source=source,
                        )
                else:
                    created = conversation_create(
                        principal=self._principal(user),
                        conversation_id=id,
                        name=name,
                        sharing=sharing,
                        source=source,
                    )
        except HostError as exc:
            raise _admission(exc) from exc
        conversation_id = created.conversation.pk
        self._audit("conversations.create", conversation_id, owner=user.get_username())
        return conversation_id

    def submit(
        self,
        conversation_id: str,
        parts: Any,
        *,
        user: str | None = None,
        request_id: str | None = None,
        when_busy: str = "queue",
    ) -> dict[str, Any] | NotReady:
        """Submit input as `user` (default: the conversation's owner), like `POST
        /v1/conversations/{id}/submissions`; returns the submission (with `idempotent`), or
        `NotReady()` when the conversation is busy and `when_busy="reject"`: nothing was
        admitted, try again later (the API's 409 "Conversation is busy"; `ctx.send` answers the
        same), unlike a request id reused with different content (`AdmissionError(conflict)`)."""
        self._require("send")
        if isinstance(parts, str):
            parts = [{"type": "text", "text": parts}]
        try:
            conversation = self._conversation(conversation_id)
            actor = self._user(user) if user is not None else conversation.owner
            with self._rated():
                if self._in_own_frame():
                    with transaction.atomic():
                        admission = submission_admit(
                            conversation_id=conversation.pk,
                            parts=parts,
                            origin=Origin.of_user(actor),
                            request_id=request_id,
                            when_busy=when_busy,
                        )
                else:
                    admission = submission_submit(
                        principal=self._principal(actor),
                        conversation_id=conversation.pk,
                        parts=parts,
                        request_id=request_id,
                        when_busy=when_busy,
                    )
        except ConversationBusy:
            return NotReady()
        except HostError as exc:
            raise _admission(exc) from exc
        self._audit(
            "conversations.submit",
            conversation_id,
            user=actor.get_username(),
            submission_id=admission.submission.pk,
        )
        data = dict(SubmissionSerializer(admission.submission).data)
        return data | {"idempotent": not admission.created}

    def list(
        self, *, owner: str | None = None, archived: bool | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Conversation summaries, newest activity first (`owner`: a username)."""
        self._require("host")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIST_MAX:
            raise AdmissionError("invalid", MSG_LIST_LIMIT)
        principal = self._principal(extension_user(self._ctx.extension_id))
        rows = conversation_selectors.conversations_list(
            principal=principal, owner=owner, archived=archived
        ).order_by("-last_activity_at", "id")[:limit]
        self._audit("conversations.list", owner or "", archived=archived)
        return [dict(item) for item in ConversationSerializer(rows, many=True).data]

    def meta(self, conversation_id: str) -> dict[str, Any]:
        """The conversation's view (name, owner, sharing, archived, version, head, busy, …)."""
        self._require("host")
        view = self._view(conversation_id)
        self._audit("conversations.meta", conversation_id)
        return view

    def watch(
        self, conversation_id: str, since_version: int = 0, *, timeout_s: float = 30.0
    ) -> Iterator[dict[str, Any]]:
        """Yield the conversation view each time its version moves past the last one seen
        (starting after `since_version`), until `timeout_s` passes or, inside a
        deadline-bounded call (route, slash command, worker run), until a margin before the
        caller's deadline (leaving it time to answer instead of being cut off and stopped),
        whichever comes first; it then ends normally. Polls every `HOST_WATCH_POLL_SECONDS`;
        never inside a frame (it would hold a transaction open)."""
        self._require("host")
        if current_frame() is not None:
            raise StateError("unavailable", MSG_WATCH_IN_FRAME)
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not 0 < timeout_s <= WATCH_MAX_SECONDS
        ):
            raise AdmissionError("invalid", MSG_TIMEOUT)
        if isinstance(since_version, bool) or not isinstance(since_version, int):
            raise AdmissionError("invalid", MSG_SINCE_VERSION)
        self._view(conversation_id)  # exists (else AdmissionError) before the first yield
        self._audit("conversations.watch", conversation_id, since_version=since_version)
        return self._watch(conversation_id, since_version, float(timeout_s))

    def _watch(self, conversation_id: str, seen: int, timeout_s: float) -> Iterator[dict[str, Any]]:
        interval = settings.HOST_WATCH_POLL_SECONDS
        until = time.monotonic() + timeout_s
        # until a margin before the caller's deadline (a route's, a worker run's)
        left = deadlines.seconds_left_nested()
        if left is not None:
            until = min(until, time.monotonic() + left)
        while True:
            version = (
                Conversation.objects.filter(pk=conversation_id)
                .values_list("version", flat=True)
                .first()
            )
            if version is None:
                return  # deleted meanwhile: nothing more will change
            if version > seen:
                view = self._view(conversation_id)
                seen = view["version"]
                yield view
                continue
            left = until - time.monotonic()
            if left <= 0:
                return
            # a bounded poll: the deadline, never a sleep past it
            time.sleep(min(interval, left))

    def _conversation(self, conversation_id: str) -> Conversation:
        principal = self._principal(extension_user(self._ctx.extension_id))
        return conversation_selectors.conversation_get(
            principal=principal, conversation_id=conversation_id
        )

    def _view(self, conversation_id: str) -> dict[str, Any]:
        principal = self._principal(extension_user(self._ctx.extension_id))
        try:
            viewed = conversation_selectors.conversation_view(
                principal=principal, conversation_id=conversation_id
            )
        except HostError as exc:
            raise _admission(exc) from exc
        return dict(ConversationSerializer(viewed).data)


class HostUsers(_Area):
    """`ctx.host.users`: the user directory (`list()`, `get(username)`)."""

    def list(self) -> list[dict[str, Any]]:
        from extensions_host.contributions.services.users import users_list

        self._require("host")
        self._audit("users.list")
        return users_list()

    def get(self, username: str) -> dict[str, Any] | None:
        from extensions_host.contributions.services.users import user_get

        self._require("host")
        self._audit("users.get", username if isinstance(username, str) else "")
        return user_get(username=username)


class HostAccess(_Area):
    """`ctx.host.access.access_of(principal, {owner, sharing})` → owner | read | none: the
    sharing contract for extension-owned records (core stores nothing for them)."""

    def access_of(self, principal: Any, resource: dict[str, Any]) -> str:
        self._require("host")
        who = self._who(principal)
        if not isinstance(resource, dict):
            raise AdmissionError("invalid", "Resource must be {owner, sharing}")
        sharing = resource.get("sharing", Sharing.PRIVATE)
        if sharing not in Sharing.values:
            raise AdmissionError("invalid", "Sharing is invalid")
        owner = resource.get("owner")
        owner_id = (
            get_user_model().objects.filter(username=owner).values_list("pk", flat=True).first()
            if username_valid(owner)
            else None
        )
        self._audit("access.access_of", owner if isinstance(owner, str) else "")
        return access_of(who, owner_id=owner_id, sharing=sharing)

    def _who(self, principal: Any) -> Principal:
        from core.auth import ANONYMOUS, sign_in_refused

        if isinstance(principal, Principal):
            return principal
        username: Any = None
        if isinstance(principal, Caller):
            username = principal.username
        elif isinstance(principal, dict):
            username = principal.get("user")
        elif isinstance(principal, str):
            username = principal
        if not username_valid(username):
            return ANONYMOUS  # none named, or a name no user can have
        # a deactivated person acts as nobody; an extension's own user is inactive by design
        # (no sign-in), yet it owns what its extension created
        users = get_user_model().objects.filter(username=username)
        if not (isinstance(username, str) and sign_in_refused(username)):
            users = users.filter(is_active=True)
        user = users.first()
        return ANONYMOUS if user is None else user_principal(user, "extension")


class HostIdentity(_Area):
    """`ctx.host.identity.acting_user(conversation_id)`: who the agent acts for (the owner)."""

    def acting_user(self, conversation_id: str) -> str | None:
        self._require("host")
        self._audit("identity.acting_user", conversation_id)
        if not conversation_id_valid(conversation_id):
            return None
        return (
            Conversation.objects.filter(pk=conversation_id)
            .values_list("owner__username", flat=True)
            .first()
        )


class _HostSurface(_Area):
    """A conversation capability of spec 04 (`ctx.interactions`, `ctx.ambient`) as host API.

    Inside the extension's frame a write joins the frame, exactly as the context handle does.
    Outside any frame (a route, a slash command, a worker, a job) each write runs in a
    host-owned transaction of its own (`ctx.transact`: the roster checks, the caller's deadline,
    retries of host-transient errors, the version bump and live updates of the conversation),
    committed when the call returns. Every call that succeeds is audited as `ext:<id>`.
    """

    grant = "attention"
    capability = ""  # the context handle this area reaches

    def _handle(self, ctx: HookContext) -> Any:
        try:
            return getattr(ctx, self.capability)
        except AttributeError as exc:  # the surfaces app registers the handle
            raise StateError("unavailable", f"Extension {self.capability} are unavailable") from exc

    def _write(self, method: str, *args: Any) -> Any:
        self._require(self.grant)
        if current_frame() is not None:
            # inside a frame: join it (another extension's or a read-only frame is a defect of
            # that frame, as for the context handle)
            return getattr(self._handle(self._ctx), method)(*args)
        return self._ctx.transact(lambda ctx: getattr(self._handle(ctx), method)(*args))


class HostInteractions(_HostSurface):
    """`ctx.host.interactions`: `seed`, `answer`, `settle` (writes) and `snapshot` (a read)."""

    capability = "interactions"

    def seed(self, conversation_id: str, record: Any) -> bool:
        seeded = bool(self._write("seed", conversation_id, record))
        self._audit(
            "interactions.seed", conversation_id, call_id=_field(record, "call_id"), seeded=seeded
        )
        return seeded

    def answer(self, conversation_id: str, call_id: str, answer: Any) -> bool:
        answered = bool(self._write("answer", conversation_id, call_id, answer))
        self._audit(
            "interactions.answer", conversation_id, call_id=_storable(call_id), answered=answered
        )
        return answered

    def settle(self, conversation_id: str, call_id: str, status: str) -> bool:
        settled = bool(self._write("settle", conversation_id, call_id, status))
        self._audit(
            "interactions.settle",
            conversation_id,
            call_id=_storable(call_id),
            status=_storable(status),
            settled=settled,
        )
        return settled

    def snapshot(self, conversation_id: str, call_id: str) -> dict[str, Any] | None:
        self._require(self.grant)
        found: dict[str, Any] | None = self._handle(self._ctx).snapshot(conversation_id, call_id)
        self._audit("interactions.snapshot", conversation_id, call_id=_storable(call_id))
        return found


class HostAmbient(_HostSurface):
    """`ctx.host.ambient`: `set` and `clear` a declared ambient surface."""

    capability = "ambient"

    def set(self, conversation_id: str, record: Any) -> None:
        self._write("set", conversation_id, record)
        self._audit("ambient.set", conversation_id, key=_field(record, "key"))

    def clear(self, conversation_id: str, key: str) -> None:
        self._write("clear", conversation_id, key)
        self._audit("ambient.clear", conversation_id, key=_storable(key))


def _field(record: Any, name: str) -> str:
    """A record's `name` (a dict or its model), for the audit entry."""
    return _storable(record.get(name) if isinstance(record, dict) else getattr(record, name, ""))


def _storable(value: Any) -> str:
    """`value` when the audit log can store it as text, else "": a read such as `snapshot`
    answers None for an id no record can have (a NUL, not a string), it is not refused."""
    return value[:256] if isinstance(value, str) and text_problem(value) is None else ""


class HostApi:
    """`ctx.host` (registered as a context capability)."""

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx
        self.conversations = HostConversations(ctx)
        self.users = HostUsers(ctx)
        self.access = HostAccess(ctx)
        self.identity = HostIdentity(ctx)

    @property
    def interactions(self) -> HostInteractions:
        """The interaction seam (`seed`, `answer`, `settle`, `snapshot`); grant `attention`."""
        area = HostInteractions(self._ctx)
        area._require("attention")
        return area

    @property
    def ambient(self) -> HostAmbient:
        """Ambient surfaces (`set`, `clear`); grant `attention`."""
        area = HostAmbient(self._ctx)
        area._require("attention")
        return area
