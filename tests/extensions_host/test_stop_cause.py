"""The logged cause of a stop (the full traceback, spec 02 §3) is redacted of the extension's
secrets before it is cut to its last `CAUSE_MAX` characters: a secret straddling the cut is
never left partly in clear."""

from __future__ import annotations

import logging
from typing import Any

from extensions_host.models import ExtensionStatus
from extensions_host.runtime.stops import CAUSE_MAX, REDACTED
from extensions_host.sdk import EmptyInput, Extension

from .conftest import roster

SECRET = "sk-live-STRADDLING-0123456789abcdefgh"  # 37 characters


def leaky() -> Extension:
    ext = Extension(id="leaky", version="1.0.0", grants={"commands"})

    @ext.command("boom", scope="global", input=EmptyInput)
    def boom(ctx: Any, data: EmptyInput) -> None:
        # the traceback ends "RuntimeError: <secret>xxx…x\n": its last 8,000 characters begin
        # inside the secret
        raise RuntimeError(ctx.stores.secrets.get("key") + "x" * 7969)

    return ext


def test_a_secret_straddling_the_cut_of_the_logged_cause_is_redacted_whole(
    install, api, owner, caplog
):
    from extensions_host.runtime import detached_context

    assert len(SECRET) == 37
    install(leaky())
    detached_context(extension_id="leaky", hook="test").stores.secrets.set("key", SECRET)

    with caplog.at_level(logging.ERROR, logger="extensions_host.stops"):
        response = api(owner).post("/v1/extensions/leaky/commands/boom", {}, format="json")

    assert response.status_code == 503
    assert roster("leaky").status == ExtensionStatus.STOPPED
    (event,) = [r for r in caplog.records if r.getMessage() == "extension_stopped"]
    assert len(event.cause) <= CAUSE_MAX
    assert event.cause.endswith(f"RuntimeError: {REDACTED}{'x' * 7969}\n")
    assert not event.cause.startswith(SECRET[-30:])
    assert not any(SECRET[n:] in event.cause for n in range(len(SECRET) - 4))
