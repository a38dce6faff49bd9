"""save=none: the payload lives only in the cache; events are durable; a restart (cache
cleared) brings back neither the ephemeral panel nor a panel that was cleared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import caches

from artifacts import services
from artifacts.ephemeral import ephemeral_cache
from artifacts.models import Event, Record
from tests.artifacts.helpers import decl, emit, head, op_context, started, visible

pytestmark = pytest.mark.django_db

SECRET = "ephemeral-panel-payload-7f3a"
ROOT = Path(__file__).resolve().parents[2]
LOCMEM = "django.core.cache.backends.locmem.LocMemCache"


def _restart() -> None:
    """What a restart does to the cache (Redis flushed, local memory gone)."""
    ephemeral_cache().clear()


def _base_caches(cache_url: str, var_dir: Path) -> dict:
    """`CACHES` as config/settings/base.py makes it from `CACHE_URL`, in a fresh process."""
    shown = subprocess.run(
        [sys.executable, "-c", "import json; from config.settings import base; "
         "print(json.dumps(base.CACHES))"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT),
             "CACHE_URL": cache_url, "HOST_VAR_DIR": str(var_dir)},
        cwd=var_dir, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return json.loads(shown.stdout)


def test_embedded_mode_keeps_save_none_payloads_in_local_memory_never_on_disk(
    world, settings, tmp_path
):
    """Spec 06: local memory embedded, gone after a restart. The embedded default cache is a
    file cache (it would keep them on disk, for the next process to find)."""
    configured = _base_caches(f"filecache://{tmp_path / 'cache'}", tmp_path)
    assert configured["artifacts"]["BACKEND"] == LOCMEM
    settings.CACHES = configured

    ctx = started(op_context(), decl("live", save="none"))
    emit(ctx, "live", SECRET, "c1")

    assert visible() == [SECRET]  # read back by this process (the web process: emit, reads)
    assert not [path for path in (tmp_path / "cache").rglob("*") if path.is_file()]
    caches["artifacts"].clear()  # the process's memory, gone with it
    assert visible() == []


def test_with_a_shared_cache_save_none_payloads_live_in_it(tmp_path):
    """Redis (production, or any `CACHE_URL` but the file cache): every process shares them."""
    url = "redis://127.0.0.1:6379/1"
    configured = _base_caches(url, tmp_path)
    assert configured["artifacts"] == configured["default"]
    assert configured["artifacts"]["LOCATION"] == url


def test_a_save_none_payload_is_never_written_to_the_database(world):
    ctx = started(op_context(), decl("live", save="none"))
    result = emit(ctx, "live", SECRET, "c1")
    record = Record.objects.get(record_id=result.record_id)
    assert record.payload is None
    assert record.payload_bytes == len(SECRET)
    assert not Record.objects.filter(payload__contains=SECRET).exists()
    assert not Event.objects.filter(record_id=result.record_id, reason__contains=SECRET).exists()
    assert visible() == [SECRET]  # from the cache


def test_a_save_none_panel_and_a_cleared_panel_do_not_come_back_after_a_restart(world):
    # op-1 leaves a durable panel on the main channel
    first = op_context(operation_id="op-1")
    ctx1 = started(first, decl("panel", save="commit", strategy="replace"))
    emit(ctx1, "panel", "old durable panel", "c1")
    services.operation_mark_core_committed(context=first, head=head(1))
    services.followup_complete(operation_id="op-1", requests=[])
    assert visible() == ["old durable panel"]

    # op-2 clears it and shows an ephemeral panel in its place
    second = op_context(operation_id="op-2", parent_head=head(1))
    ctx2 = started(
        second,
        decl("panel", save="commit", strategy="replace"),
        decl("live", save="none", strategy="replace"),
    )
    services.artifact_clear(context=ctx2, output="panel", tool_call_id="c2")
    emit(ctx2, "live", SECRET, "c3")
    assert visible() == [SECRET]

    _restart()

    assert visible() == []
    clear = Event.objects.get(kind="clear")
    assert (clear.operation_id, clear.output) == ("op-2", "panel")  # the clear survived


def test_an_evicted_replace_panel_does_not_bring_back_the_one_it_replaced(world):
    ctx = started(
        op_context(),
        decl("durable", save="operation", strategy="replace"),
        decl("live", save="none", strategy="replace"),
    )
    emit(ctx, "durable", "older panel", "c1")
    emit(ctx, "live", SECRET, "c2")
    assert visible() == [SECRET]
    _restart()
    assert visible() == []


def test_the_debug_view_shows_an_evicted_payload_as_unavailable(world):
    from artifacts.selectors import debug_read

    ctx = started(op_context(), decl("live", save="none"))
    emit(ctx, "live", SECRET, "c1")
    _restart()
    row = debug_read(world_id="world-1")["records"][0]
    assert (row["payload"], row["payload_available"], row["status"]) == (None, False, "active")


def test_the_identical_call_after_a_restart_is_idempotent_and_puts_its_payload_back(world):
    ctx = started(op_context(), decl("live", save="none"))
    first = emit(ctx, "live", SECRET, "c1")
    _restart()
    again = emit(ctx, "live", SECRET, "c1")
    assert (again.idempotent, again.record_id) == (True, first.record_id)
    assert Record.objects.count() == 1
    assert visible() == [SECRET]


def test_a_superseded_ephemeral_payload_is_dropped_from_the_cache_on_commit(
    world, django_capture_on_commit_callbacks
):
    op = op_context()
    ctx = started(op, decl("live", save="none"))
    record = Record.objects.get(record_id=emit(ctx, "live", SECRET, "c1").record_id)
    services.operation_mark_core_committed(context=op, head=head(1))
    key = f"hyphae:artifacts:payload:{record.pk}"
    assert ephemeral_cache().get(key) == SECRET

    with django_capture_on_commit_callbacks(execute=True):
        services.followup_complete(operation_id="op-1", requests=[])

    assert ephemeral_cache().get(key) is None


def test_an_ephemeral_panel_shows_while_the_operation_runs(world):
    ctx = started(op_context(), decl("live", save="none"))
    emit(ctx, "live", SECRET, "c1")
    assert visible() == [SECRET]
