"""Every write and business rule of conversations (spec 01), one module per concern.

- `conversations`: create (idempotent on the client id), update, fork, retention.
- `submissions`: admission (request-id idempotency, when_busy, not_before), withdrawal.
- `runs`: claim, heartbeat, steers, entry appends, lease expiry.
- `settle`: settling runs and the gap-free settled sequence.
- `common`: messages, the version bump (`conversation_touch`), content checks.
"""

from __future__ import annotations

from conversations.services.common import (
    conversation_lock,
    conversation_touch,
    json_check,
    parts_check,
)
from conversations.services.conversations import (
    Created,
    conversation_create,
    conversation_ensure,
    conversation_fork,
    conversation_update,
    conversations_retention_sweep,
)
from conversations.services.runs import (
    Appended,
    Claim,
    entry_append,
    run_claim,
    run_heartbeat,
    run_steers_take,
    runs_expire_leases,
)
from conversations.services.settle import (
    Settled,
    run_settle,
    run_settled_after_commit,
    settled_sequence_next,
)
from conversations.services.submissions import (
    Admission,
    ConversationBusy,
    Origin,
    submission_admit,
    submission_submit,
    submission_withdraw,
)

__all__ = [
    "Admission",
    "Appended",
    "Claim",
    "ConversationBusy",
    "Created",
    "Origin",
    "Settled",
    "conversation_create",
    "conversation_ensure",
    "conversation_fork",
    "conversation_lock",
    "conversation_touch",
    "conversation_update",
    "conversations_retention_sweep",
    "entry_append",
    "json_check",
    "parts_check",
    "run_claim",
    "run_heartbeat",
    "run_settle",
    "run_settled_after_commit",
    "run_steers_take",
    "runs_expire_leases",
    "settled_sequence_next",
    "submission_admit",
    "submission_submit",
    "submission_withdraw",
]
