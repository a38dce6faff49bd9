"""Records, documents and quotas: every bound is a typed error and nothing is written
(spec 02 §4, §7)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from conversations.models import Conversation
from core.validation import PROBLEM_NUL
from extensions_host.models import ExtensionDocument, ExtensionRecord, UsageSlot
from extensions_host.sdk import MAX_RECORD_BYTES, StateError
from extensions_host.services.documents import documents_fork
from extensions_host.services.quotas import usage_totals

from .conftest import roster, write
from .exts import Item, Pad, make_ext


def stored() -> list[tuple[str, str, str | None]]:
    return list(ExtensionRecord.objects.values_list("collection", "key", "index"))


@pytest.fixture
def alpha(install):
    install(make_ext("alpha"))


def blob_for(total_bytes: int) -> str:
    """A blob that makes the encoded Item exactly `total_bytes` long."""
    overhead = len(Item(key="k", blob="").model_dump_json().encode())
    return "b" * (total_bytes - overhead)


@pytest.mark.parametrize(
    ("case", "body", "kind"),
    [
        ("key of 0 chars", lambda c: c.collection("item").put(Item(key="")), "bound"),
        ("key of 257 chars", lambda c: c.collection("item").put(Item(key="k" * 257)), "bound"),
        ("index of 0 chars", lambda c: c.collection("item").put(Item(key="k", tag="")), "bound"),
        ("index of 257", lambda c: c.collection("item").put(Item(key="k", tag="t" * 257)), "bound"),
        (
            "value of 1 MiB + 1 byte",
            lambda c: c.collection("item").put(Item(key="k", blob=blob_for(MAX_RECORD_BYTES + 1))),
            "bound",
        ),
        ("page limit 0", lambda c: c.collection("item").page(limit=0), "bound"),
        ("page limit 65", lambda c: c.collection("item").page(limit=65), "bound"),
        ("invalid model", lambda c: c.collection("item").put({"key": "k", "n": "many"}), "encode"),
        ("wrong type", lambda c: c.collection("item").put(Pad(text="x")), "encode"),
        ("undeclared", lambda c: c.collection("nope").put(Item(key="k")), "bound"),
        ("get key bound", lambda c: c.collection("item").get("k" * 257), "bound"),
        # text the database cannot store: a NUL (PostgreSQL), a lone surrogate (any database)
        ("key with a NUL", lambda c: c.collection("item").put(Item(key="a\x00b")), "bound"),
        (
            "index with a NUL",
            lambda c: c.collection("item").put(Item(key="k", tag="t\x00")),
            "bound",
        ),
        ("get key with a NUL", lambda c: c.collection("item").get("a\x00b"), "bound"),
        ("get key with a surrogate", lambda c: c.collection("item").get("a\ud800"), "bound"),
        ("cursor with a NUL", lambda c: c.collection("item").page(after="a\x00"), "bound"),
        ("cursor with a surrogate", lambda c: c.collection("item").page(after="\udfff"), "bound"),
        ("page index with a NUL", lambda c: c.collection("item").page(index="t\x00"), "bound"),
        ("remove key with a NUL", lambda c: c.collection("item").remove("a\x00b"), "bound"),
        (
            "value with a surrogate",
            lambda c: c.collection("item").put(Item(key="k", blob="\ud800")),
            "encode",
        ),
    ],
)
def test_each_record_bound_is_a_typed_error_and_nothing_is_written(alpha, case, body, kind):
    def attempt(ctx: Any) -> None:
        ctx.collection("item").put(Item(key="written-first"))
        body(ctx)

    outcome = write(attempt)

    assert outcome.status == "failed", case
    assert isinstance(outcome.error, StateError)
    assert outcome.error.kind == kind
    assert stored() == []
    assert roster("alpha").status == "running"


def test_a_key_the_database_cannot_store_is_refused_saying_why(alpha):
    outcome = write(lambda c: c.collection("item").get("a\x00b"))

    assert outcome.error.message == f"A record key cannot be stored: {PROBLEM_NUL}"
    assert roster("alpha").status == "running"


def test_a_nul_inside_a_value_or_a_document_is_stored_and_read_back(alpha, conversation):
    conversation("c1")

    def body(ctx: Any) -> None:
        ctx.collection("item").put(Item(key="k", blob="a\x00b"))
        ctx.document("pad").update("c1", lambda p: Pad(text="a\x00b"))

    assert write(body).ok
    assert write(
        lambda c: (c.collection("item").get("k").blob, c.document("pad").read("c1").text)
    ).value == ("a\x00b", "a\x00b")


def test_a_value_of_exactly_1_mib_is_accepted(alpha):
    outcome = write(
        lambda c: c.collection("item").put(Item(key="k", blob=blob_for(MAX_RECORD_BYTES)))
    )

    assert outcome.ok
    assert ExtensionRecord.objects.get().size_bytes == MAX_RECORD_BYTES


def test_keys_of_1_and_256_characters_are_accepted(alpha):
    def body(ctx: Any) -> None:
        ctx.collection("item").put(Item(key="k"))
        ctx.collection("item").put(Item(key="k" * 256, tag="t" * 256))

    assert write(body).ok
    assert len(stored()) == 2


def test_pages_are_ordered_by_key_with_an_after_cursor_and_an_index_filter(alpha):
    def fill(ctx: Any) -> None:
        for key in ["d", "a", "c", "b", "e"]:
            ctx.collection("item").put(Item(key=key, tag="odd" if key in "ace" else "even"))

    assert write(fill).ok

    def pages(ctx: Any) -> Any:
        items = ctx.collection("item")
        return {
            "first": [i.key for i in items.page(limit=2)],
            "after_b": [i.key for i in items.page(limit=64, after="b")],
            "odd": [i.key for i in items.page(index="odd")],
            "odd_after_a": [i.key for i in items.page(limit=1, after="a", index="odd")],
        }

    assert write(pages).value == {
        "first": ["a", "b"],
        "after_b": ["c", "d", "e"],
        "odd": ["a", "c", "e"],
        "odd_after_a": ["c"],
    }


def test_put_replaces_and_remove_deletes(alpha):
    assert write(lambda c: c.collection("item").put(Item(key="k", n=1))).ok
    assert write(lambda c: c.collection("item").put(Item(key="k", n=2, tag="x"))).ok
    assert write(lambda c: c.collection("item").get("k")).value == Item(key="k", n=2, tag="x")
    assert write(lambda c: c.collection("item").remove("k")).value is True
    assert write(lambda c: c.collection("item").remove("k")).value is False
    assert stored() == []


def test_a_stored_value_that_no_longer_decodes_is_a_decode_error(alpha):
    assert write(lambda c: c.collection("item").put(Item(key="k"))).ok
    ExtensionRecord.objects.update(value='{"key": "k", "n": "not a number"}')

    outcome = write(lambda c: c.collection("item").get("k"))

    assert outcome.error.kind == "decode"


def test_state_needs_the_state_grant(install):
    install(make_ext("alpha", grants={"timers"}))

    outcome = write(lambda c: c.collection("item").get("k"))

    assert outcome.error.kind == "closed"  # AdmissionError: every missing grant alike
    assert outcome.error.message == "Extension is not granted state"


# --- documents --------------------------------------------------------------------------------


def test_a_document_reads_its_initial_value_then_what_was_written(alpha, conversation):
    conversation("c1")
    assert write(lambda c: c.document("pad").read("c1")).value == Pad()

    outcome = write(lambda c: c.documents["pad"].update("c1", lambda p: Pad(text=p.text + "hi")))

    assert outcome.ok
    assert write(lambda c: c.document("pad").read("c1")).value == Pad(text="hi")
    assert ExtensionDocument.objects.get().value == '{"text":"hi"}'
    assert Conversation.objects.get(pk="c1").version == 1


@pytest.mark.parametrize(
    ("case", "body", "kind"),
    [
        (
            "over max_bytes",
            lambda c: c.document("pad").update("c1", lambda p: Pad(text="x" * 300)),
            "bound",
        ),
        (
            "invalid value",
            lambda c: c.document("pad").update("c1", lambda p: {"text": 5}),
            "encode",
        ),
        ("bad conversation id", lambda c: c.document("pad").read("no spaces"), "bound"),
        ("missing conversation", lambda c: c.document("pad").update("c9", lambda p: p), "bound"),
        ("undeclared", lambda c: c.document("nope").read("c1"), "bound"),
        (
            "lone surrogate",
            lambda c: c.document("pad").update("c1", lambda p: Pad(text="\ud800")),
            "encode",
        ),
    ],
)
def test_document_bounds_are_typed_errors_and_nothing_is_written(
    alpha, conversation, case, body, kind
):
    conversation("c1")

    outcome = write(body)

    assert outcome.status == "failed", case
    assert outcome.error.kind == kind
    assert not ExtensionDocument.objects.exists()


def test_a_failed_first_update_that_the_hook_swallows_leaves_no_document(alpha, conversation):
    """The row a first update inserts to lock is rolled back with it: reads still see `initial`."""
    conversation("c1")

    def body(ctx: Any) -> None:
        with contextlib.suppress(StateError):
            ctx.document("pad").update("c1", lambda p: Pad(text="x" * 300))  # over max_bytes
        ctx.collection("item").put(Item(key="k"))

    assert write(body).ok
    assert not ExtensionDocument.objects.exists()
    assert write(lambda c: c.document("pad").read("c1")).value == Pad()


def test_a_stored_document_that_no_longer_decodes_is_a_decode_error(alpha, conversation):
    conversation("c1")
    assert write(lambda c: c.document("pad").update("c1", lambda p: Pad(text="a"))).ok
    ExtensionDocument.objects.update(value='{"text": 12}')

    assert write(lambda c: c.document("pad").read("c1")).error.kind == "decode"


def test_fork_copies_copy_documents_and_resets_reset_documents(install, conversation):
    install(make_ext("alpha"), make_ext("beta", pad_fork="reset"))
    conversation("parent")
    conversation("child")
    for ext in ("alpha", "beta"):
        assert write(
            lambda c: c.document("pad").update("parent", lambda p: Pad(text="parent")), ext
        ).ok

    documents_fork(parent_id="parent", child_id="child")

    assert write(lambda c: c.document("pad").read("child"), "alpha").value == Pad(text="parent")
    assert write(lambda c: c.document("pad").read("child"), "beta").value == Pad()
    assert ExtensionDocument.objects.filter(conversation_id="child").count() == 1


# --- quotas -----------------------------------------------------------------------------------


def test_usage_is_counted_per_extension(alpha):
    assert write(lambda c: [c.collection("item").put(Item(key=k)) for k in "abc"]).ok
    assert write(lambda c: c.collection("item").remove("a")).ok

    records, size = usage_totals(extension_id="alpha")
    assert records == 2
    assert size == sum(ExtensionRecord.objects.values_list("size_bytes", flat=True))
    assert UsageSlot.objects.filter(extension_id="alpha").count() >= 1


def test_a_write_over_the_record_quota_is_a_bound_error_naming_it(alpha):
    row = roster("alpha")
    row.quotas = {"max_records": 2}
    row.save()
    assert write(lambda c: [c.collection("item").put(Item(key=k)) for k in "ab"]).ok

    outcome = write(lambda c: c.collection("item").put(Item(key="c")))
    replace = write(lambda c: c.collection("item").put(Item(key="a", n=5)))

    assert outcome.error.kind == "bound"
    assert "max_records" in outcome.error.message
    assert replace.ok  # replacing a record adds none
    assert sorted(k for _, k, _ in stored()) == ["a", "b"]


def test_a_write_over_the_byte_quota_is_a_bound_error_naming_it(alpha, settings):
    settings.HOST_QUOTAS = {**settings.HOST_QUOTAS, "max_bytes": 200}

    outcome = write(lambda c: c.collection("item").put(Item(key="k", blob="x" * 300)))

    assert outcome.error.kind == "bound"
    assert "max_bytes" in outcome.error.message
    assert stored() == []


def test_replacing_a_record_charges_only_the_size_difference(alpha, settings):
    record_bytes = 100
    settings.HOST_QUOTAS = {**settings.HOST_QUOTAS, "max_bytes": 2 * record_bytes + 10}
    blob = blob_for(record_bytes)

    def put(n: int) -> Any:
        # one digit of n: every version encodes to exactly record_bytes
        return write(lambda c: c.collection("item").put(Item(key="k", n=n, blob=blob)))

    assert put(0).ok
    replacements = [put(n % 10) for n in range(1, 11)]

    assert [outcome.ok for outcome in replacements] == [True] * 10
    assert write(lambda c: c.collection("item").get("k")).value.n == 0  # the 10th replacement
    assert ExtensionRecord.objects.get().size_bytes == record_bytes
    assert usage_totals(extension_id="alpha") == (1, record_bytes)
