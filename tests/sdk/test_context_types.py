"""`ctx: Context` is the whole context a hook receives, typed: mypy (the project's own
configuration) accepts an author's correct code, rejects wrong calls and wrong hook
signatures, and the SDK's protocols declare exactly what the runtime's handles take."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FunctionType, SimpleNamespace
from typing import Any

import pytest
from django.conf import settings

from extensions_host import sdk
from extensions_host.background.services.timers import TimerAccess
from extensions_host.contributions.services import hostapi, stores
from extensions_host.runtime.context import (
    CollectionAccess,
    DocumentAccess,
    HookContext,
    capabilities,
)
from extensions_host.surfaces import capabilities as handles
from tests.examples.test_extending_doc import titled_blocks

BASE_DIR = Path(settings.BASE_DIR)
AUTHORS = Path(__file__).parent / "authors"
ERROR = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$", re.M)
EXPECTED = re.compile(r"# E: (?P<code>[a-z-]+)$")


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for this module's mypy runs: the first analyses the host, the others reuse it."""
    return tmp_path_factory.mktemp("mypy-cache")


def mypy(cache: Path, *files: Path) -> tuple[int, str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(BASE_DIR / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            *map(str, files),
        ],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    return done.returncode, done.stdout + done.stderr


def test_an_author_typing_ctx_as_context_type_checks_with_every_documented_member(
    mypy_cache: Path, tmp_path: Path
):
    walkthrough = tmp_path / "todo_ext" / "extension.py"
    walkthrough.parent.mkdir()
    doc = (BASE_DIR / "docs" / "extending.md").read_text()
    walkthrough.write_text(titled_blocks(doc)["todo-ext/todo_ext/extension.py"])

    status, output = mypy(mypy_cache, AUTHORS / "typed_author.py", walkthrough)

    assert status == 0, output
    assert "ctx: Context" in walkthrough.read_text()
    # the decorators hand back the author's own function, and `ext.workers`/`ext.jobs` are typed
    revealed = re.findall(r'Revealed type is "(.*)"', output)
    assert revealed == [
        "builtins.tuple[extensions_host.background.declarations.Worker, ...]",
        "builtins.tuple[extensions_host.background.declarations.Job, ...]",
        "def (ctx: extensions_host.sdk.context.Context, "
        "timer: extensions_host.sdk.models.TimerEvent)",
        "def (ctx: extensions_host.sdk.context.Context, conversation_id: builtins.str, "
        "data: tests.sdk.authors.typed_author.Note) -> builtins.dict[builtins.str, builtins.str]",
    ]


def test_wrong_calls_on_ctx_and_wrong_hook_signatures_are_mypy_errors(mypy_cache: Path):
    source = AUTHORS / "mistyped_author.py"
    expected = {
        (number, match["code"])
        for number, line in enumerate(source.read_text().splitlines(), start=1)
        if (match := EXPECTED.search(line))
    }

    status, output = mypy(mypy_cache, source)

    found = {(int(m["line"]), m["code"]) for m in ERROR.finditer(output)}
    assert status == 1
    assert len(expected) >= 20
    assert found == expected, output


def test_the_runtime_handles_are_what_the_sdk_protocols_declare(mypy_cache: Path, tmp_path: Path):
    """The types, by mypy: each runtime handle stands where its protocol is expected."""
    check = tmp_path / "runtime_handles.py"
    check.write_text(RUNTIME_HANDLES)

    status, output = mypy(mypy_cache, check)

    assert status == 0, output


RUNTIME_HANDLES = """
from typing import Any

from extensions_host import sdk
from extensions_host.background.services.timers import TimerAccess
from extensions_host.contributions.services import hostapi, stores
from extensions_host.runtime.context import CollectionAccess, DocumentAccess, HookContext
from extensions_host.surfaces import capabilities


def implements(ctx: HookContext) -> None:
    collection: sdk.CollectionHandle[Any] = CollectionAccess(ctx, "c")
    document: sdk.DocumentHandle[Any] = DocumentAccess(ctx, "d")
    documents: sdk.DocumentsHandle = ctx.documents
    timers: sdk.TimersHandle = TimerAccess(ctx)
    send: sdk.SendHandle = capabilities.SendHandle(ctx)
    attention: sdk.AttentionHandle = capabilities.AttentionHandle(ctx)
    interactions: sdk.InteractionsHandle = capabilities.InteractionsHandle(ctx)
    ambient: sdk.AmbientHandle = capabilities.AmbientHandle(ctx)
    stored: sdk.StoresHandle = stores.Stores(ctx)
    secrets: sdk.SecretsHandle = stores.SecretsHandle(ctx)
    settings: sdk.SettingsHandle = stores.SettingsHandle(ctx)
    paths: sdk.PathsHandle = stores.PathsHandle(ctx)
    host: sdk.HostHandle = hostapi.HostApi(ctx)
    conversations: sdk.HostConversationsHandle = hostapi.HostConversations(ctx)
    users: sdk.HostUsersHandle = hostapi.HostUsers(ctx)
    access: sdk.HostAccessHandle = hostapi.HostAccess(ctx)
    identity: sdk.HostIdentityHandle = hostapi.HostIdentity(ctx)
    host_interactions: sdk.InteractionsHandle = hostapi.HostInteractions(ctx)
    host_ambient: sdk.AmbientHandle = hostapi.HostAmbient(ctx)
"""


# --- the same, by the signatures the interpreter sees (names, kinds, defaults) ----------------

DUMMY = SimpleNamespace(id="x", extension_id="x", revision="r", _loaded=None)
HANDLES: list[tuple[type, Callable[[Any], Any]]] = [
    (sdk.CollectionHandle, lambda ctx: CollectionAccess),
    (sdk.DocumentHandle, lambda ctx: DocumentAccess),
    (sdk.TimersHandle, TimerAccess),
    (sdk.SendHandle, handles.SendHandle),
    (sdk.AttentionHandle, handles.AttentionHandle),
    (sdk.InteractionsHandle, handles.InteractionsHandle),
    (sdk.InteractionsHandle, hostapi.HostInteractions),
    (sdk.AmbientHandle, handles.AmbientHandle),
    (sdk.AmbientHandle, hostapi.HostAmbient),
    (sdk.StoresHandle, stores.Stores),
    (sdk.SecretsHandle, stores.SecretsHandle),
    (sdk.SettingsHandle, stores.SettingsHandle),
    (sdk.PathsHandle, lambda ctx: stores.PathsHandle),  # the class: an instance makes folders
    (sdk.HostHandle, hostapi.HostApi),
    (sdk.HostConversationsHandle, hostapi.HostConversations),
    (sdk.HostUsersHandle, hostapi.HostUsers),
    (sdk.HostAccessHandle, hostapi.HostAccess),
    (sdk.HostIdentityHandle, hostapi.HostIdentity),
]


def declared(protocol: type) -> set[str]:
    """The protocol's members: its methods, properties and attributes (and `__call__`)."""
    names = {*vars(protocol), *vars(protocol).get("__annotations__", {})}
    return {name for name in names if not name.startswith("_") or name == "__call__"}


def offered(obj: Any) -> set[str]:
    """What a runtime handle (an instance, or a class) offers: methods, properties, instance
    attributes."""
    cls = obj if isinstance(obj, type) else type(obj)
    names = {
        name
        for name in dir(cls)
        if not name.startswith("_")
        and isinstance(inspect.getattr_static(cls, name), FunctionType | property)
    }
    if not isinstance(obj, type):
        names |= {name for name in vars(obj) if not name.startswith("_")}
    return names | ({"__call__"} if "__call__" in vars(cls) else set())


def parameters(fn: Any, *, bound: bool = False) -> list[tuple[str, str, Any]]:
    """(name, kind, default) of each parameter, without `self`."""
    found = list(inspect.signature(fn).parameters.values())
    return [(p.name, p.kind.name, p.default) for p in (found if bound else found[1:])]


def methods(protocol: type) -> dict[str, FunctionType]:
    """The protocol's methods (its properties and attributes are mypy's to check)."""
    members = {name: inspect.getattr_static(protocol, name, None) for name in declared(protocol)}
    return {name: fn for name, fn in members.items() if isinstance(fn, FunctionType)}


@pytest.mark.parametrize(
    ("protocol", "make"), HANDLES, ids=[f"{p.__name__}-{i}" for i, (p, _) in enumerate(HANDLES)]
)
def test_each_protocol_declares_its_runtime_handle_exactly(protocol: type, make: Any):
    runtime = make(DUMMY)

    assert declared(protocol) == offered(runtime)
    for name, method in methods(protocol).items():
        if isinstance(runtime, type):
            actual = parameters(inspect.getattr_static(runtime, name))
        else:
            actual = parameters(getattr(runtime, name), bound=True)
        assert actual == parameters(method), f"{protocol.__name__}.{name}"


def test_context_declares_every_member_a_hook_context_offers_and_every_capability(db):
    ctx = HookContext(loaded=DUMMY, hook="test", grants=frozenset())  # type: ignore[arg-type]

    # the capabilities other apps attach (`register_capability`, in their `AppConfig.ready`)
    assert {"timers", "send", "stores", "host", "has_pending_steer"} <= set(capabilities)
    assert declared(sdk.Context) == offered(ctx) | set(capabilities)
    for name, method in methods(sdk.Context).items():
        factory = capabilities.get(name)
        actual = factory(ctx) if factory is not None else getattr(ctx, name)
        assert parameters(actual, bound=True) == parameters(method), f"Context.{name}"


@pytest.mark.parametrize(
    ("flat", "protocol", "method"),
    [
        ("seed_interaction", sdk.InteractionsHandle, "seed"),
        ("answer_interaction", sdk.InteractionsHandle, "answer"),
        ("settle_interaction", sdk.InteractionsHandle, "settle"),
        ("snapshot_interaction", sdk.InteractionsHandle, "snapshot"),
        ("set_ambient", sdk.AmbientHandle, "set"),
        ("clear_ambient", sdk.AmbientHandle, "clear"),
    ],
)
def test_the_flat_capability_names_are_typed_as_their_handles_methods(
    flat: str, protocol: type, method: str
):
    assert inspect.signature(getattr(sdk.Context, flat)) == inspect.signature(
        getattr(protocol, method)
    )
