"""A complete world for the security suite: one conversation with every kind of object that
hangs off it (entries, a queued submission, a settled and a live run, an artifact operation, an
interaction, extension state), an installed extension with commands and a job, and tokens; plus
the API's operations enumerated from the live OpenAPI schema, so a new route is covered the day
it lands."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.cache import cache

from core.services import token_create
from extensions_host import registry
from extensions_host.runtime import forget_activations, run_frame
from extensions_host.services.roster import roster_sync
from tests.conversations.conftest import Kit
from tests.security.exts import guarded

OPERATION_CONTEXT = {
    "world_id": "c",
    "parent_head": "h0",
    "operation_id": "op-1",
    "preset_id": "preset",
    "preset_revision": "r1",
    "preset_scripts_enabled": False,
}
REQUEST_CONTEXT = {
    **OPERATION_CONTEXT,
    "request_id": "req-1",
    "request_attempt": 1,
    "max_artifact_bytes": 1024 * 1024,
    "declarations": [
        {
            "name": "panel",
            "channel": "main",
            "content_type": "text/markdown",
            "save": "operation",
            "strategy": "append",
            "invalidation": "never",
            "max_emits": 5,
        }
    ],
}
WRITE_METHODS = ("post", "put", "patch", "delete")


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # template, e.g. /v1/conversations/{conversation_id}
    operation_id: str
    has_body: bool
    extensions: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.path}"


def api_operations() -> list[Operation]:
    """Every operation of the generated schema (what `/v1/schema` serves)."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            found.append(
                Operation(
                    method=method,
                    path=path,
                    operation_id=operation["operationId"],
                    has_body="requestBody" in operation,
                    extensions={k: v for k, v in operation.items() if k.startswith("x-")},
                )
            )
    return sorted(found, key=lambda op: (op.path, op.method))


@dataclass
class World:
    """The objects of one conversation `c` (owner: `owner`) and what a path needs to name them."""

    sharing: str
    ids: dict[str, Any]

    def url(self, template: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            if name == "name":
                return self.command_name(template)
            return str(self.ids.get(name, "x"))

        return re.sub(r"\{(\w+)\}", value, template)

    @staticmethod
    def command_name(template: str) -> str:
        if "/extensions/" in template:
            return "note" if template.startswith("/v1/conversations/") else "count"
        return "help"  # the host's own slash command


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    cache.clear()  # throttle buckets, send rates and save=none payloads live in the cache
    yield
    cache.clear()


@pytest.fixture
def installed(db: Any) -> Iterator[None]:
    with ExitStack() as stack:
        stack.enter_context(registry.installed(guarded))
        forget_activations()
        roster_sync()
        yield
    forget_activations()


@pytest.fixture
def kit(owner: Any) -> Kit:
    return Kit(default_owner=owner)


@pytest.fixture
def build_world(installed, kit, owner, api) -> Callable[[str], World]:
    """`build_world(sharing)`: conversation `c` and a busy conversation `b` (a live run), both of
    `owner` with that sharing, with one of everything."""

    def build(sharing: str) -> World:
        from extensions_host.background.services.jobs import jobs_list

        kit.conversation("c", sharing=sharing)
        kit.submit("c", request_id="s0")
        settled = kit.settle(kit.claim("c"))
        queued = kit.submit("c", request_id="s1")
        kit.conversation("b", sharing=sharing)
        kit.submit("b", request_id="s2")
        live = kit.claim("b")
        runtime = api("service")
        # a head names an entry of the world's conversation (spec 06)
        head = {"parent_head": str(settled.answer_entry_id)}
        for path, body in (
            ("operations", {"context": {**OPERATION_CONTEXT, **head}}),
            ("attempts", {"context": {**REQUEST_CONTEXT, **head}}),
            (
                "emit",
                {
                    "context": {**REQUEST_CONTEXT, **head},
                    "output": "panel",
                    "payload": "hello",
                    "tool_call_id": "call-0",
                },
            ),
        ):
            response = runtime.post(f"/v1/artifacts/{path}", body, format="json")
            assert response.status_code == 200, response.content
        seeded = run_frame(
            extension_id="guarded",
            hook="on_timer",
            boundary="worker",
            call=lambda ctx: ctx.seed_interaction(
                "c", {"call_id": "call-1", "kind": "approval", "prompt": "Ship it?"}
            ),
        )
        assert seeded.ok, seeded
        token, _ = token_create(user=owner, name="owner's", scope="write", expires_at=None)
        jobs = [job["id"] for job in jobs_list() if job["extension_id"] == "guarded"]
        return World(
            sharing=sharing,
            ids={
                "conversation_id": "c",
                "world_id": "c",
                "run_id": live.pk,
                "settled_run_id": settled.pk,
                "entry_id": settled.answer_entry_id,
                "submission_id": queued.pk,
                "extension_id": "guarded",
                "operation_id": "op-1",
                "call_id": "call-1",
                "token_id": token.pk,
                "job_id": jobs[0] if jobs else "missing-job",
                "skill": "none",
                "path": "none",
            },
        )

    return build
