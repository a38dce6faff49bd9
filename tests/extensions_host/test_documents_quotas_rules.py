"""Documents and quotas at their edges: exact bounds, bytes not characters, declarations kept in
step with the code, and usage counted across the frames of a page (spec 02 §4, §7)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from extensions_host.models import (
    DocumentDeclaration,
    ExtensionDocument,
    ExtensionRecord,
    RosterEntry,
    UsageSlot,
)
from extensions_host.runtime import run_frame, run_page
from extensions_host.sdk import Document, Extension
from extensions_host.services.documents import documents_fork
from extensions_host.services.quotas import MSG_QUOTA_UNKNOWN, quotas_problems, usage_totals

from .conftest import roster, write
from .exts import Item, Pad, make_ext

PAD_MAX_BYTES = 256  # make_ext's default


def pad_of(total_bytes: int) -> Pad:
    """A pad whose encoded JSON is exactly `total_bytes` long."""
    overhead = len(Pad().model_dump_json().encode())
    return Pad(text="x" * (total_bytes - overhead))


def put(key: str, blob: str = "") -> Any:
    return lambda ctx: ctx.collection("item").put(Item(key=key, blob=blob))


def size_of(key: str, blob: str = "") -> int:
    return len(Item(key=key, blob=blob).model_dump_json().encode())


def set_quotas(extension_id: str, **quotas: int) -> None:
    row = roster(extension_id)
    row.quotas = quotas
    row.save()


@pytest.fixture
def alpha(install):
    install(make_ext("alpha"))


# --- documents --------------------------------------------------------------------------------


def test_a_document_of_exactly_max_bytes_is_stored_and_read_back(alpha, conversation):
    conversation("c1")
    full = pad_of(PAD_MAX_BYTES)

    assert write(lambda c: c.document("pad").update("c1", lambda p: full)).ok
    assert write(lambda c: c.document("pad").read("c1")).value == full
    assert write(lambda c: c.document("pad").update("c1", lambda p: p)).ok


def test_a_document_one_byte_over_max_bytes_is_a_bound_error(alpha, conversation):
    conversation("c1")

    outcome = write(lambda c: c.document("pad").update("c1", lambda p: pad_of(PAD_MAX_BYTES + 1)))

    assert outcome.error.kind == "bound"
    assert "max_bytes" in outcome.error.message
    assert not ExtensionDocument.objects.exists()


def test_a_documents_max_bytes_counts_encoded_bytes_not_characters(alpha, conversation):
    conversation("c1")
    wide = Pad(text="é" * 200)  # 200 characters, 400 bytes in UTF-8
    assert len(wide.model_dump_json()) <= PAD_MAX_BYTES < len(wide.model_dump_json().encode())

    outcome = write(lambda c: c.document("pad").update("c1", lambda p: wide))

    assert outcome.error.kind == "bound"
    assert not ExtensionDocument.objects.exists()


def test_an_update_returns_the_value_it_stored(alpha, conversation):
    conversation("c1")
    assert write(lambda c: c.document("pad").update("c1", lambda p: Pad(text="one"))).ok

    outcome = write(lambda c: c.document("pad").update("c1", lambda p: {"text": p.text + " two"}))

    assert outcome.value == Pad(text="one two")


@pytest.fixture
def over_lowered_max_bytes(install, conversation):
    """A document of 200 bytes stored, then a new version declaring `max_bytes=64`."""
    install(make_ext("alpha"))
    conversation("c1")
    assert write(lambda c: c.document("pad").update("c1", lambda p: pad_of(200))).ok
    install(make_ext("alpha", version="2.0.0", pad_max_bytes=64))


def test_a_stored_document_over_a_lowered_max_bytes_still_reads(over_lowered_max_bytes):
    """The bound is the writer's: what was stored within the old one stays readable."""
    outcome = write(lambda c: c.document("pad").read("c1"))

    assert outcome.value == pad_of(200)


def test_a_stored_document_over_a_lowered_max_bytes_can_be_shrunk_but_not_kept(
    over_lowered_max_bytes,
):
    kept = write(lambda c: c.document("pad").update("c1", lambda p: p))
    shrunk = write(lambda c: c.document("pad").update("c1", lambda p: Pad(text=p.text[:10])))

    assert kept.error.kind == "bound"
    assert "max_bytes" in kept.error.message
    assert shrunk.value == Pad(text=pad_of(200).text[:10])
    assert roster("alpha").status == "running"


def test_a_changed_fork_policy_applies_to_the_next_fork(install, conversation):
    install(make_ext("alpha", pad_fork="copy"))
    conversation("parent")
    conversation("child")
    assert write(lambda c: c.document("pad").update("parent", lambda p: Pad(text="kept"))).ok

    install(make_ext("alpha", version="2.0.0", pad_fork="reset"))
    documents_fork(parent_id="parent", child_id="child")

    assert write(lambda c: c.document("pad").read("child")).value == Pad()
    assert not ExtensionDocument.objects.filter(conversation_id="child").exists()


def test_a_fork_copies_only_the_parents_documents(alpha, conversation):
    """Other conversations' documents sort before and after the parent's."""
    for cid in ("a-other", "parent", "z-other"):
        conversation(cid)
        assert write(lambda c, cid=cid: c.document("pad").update(cid, lambda p: Pad(text=cid))).ok
    conversation("child")

    copied = documents_fork(parent_id="parent", child_id="child")

    assert copied == 1
    assert write(lambda c: c.document("pad").read("child")).value == Pad(text="parent")


class Note(BaseModel):
    text: str = ""


def with_documents(ext_id: str, *names: str, version: str = "1.0.0") -> Extension:
    return Extension(
        id=ext_id,
        version=version,
        grants={"state"},
        documents={name: Document(Note) for name in names},
    )


def declared() -> list[tuple[str, str]]:
    return sorted(DocumentDeclaration.objects.values_list("extension_id", "name"))


def test_a_document_no_longer_declared_loses_its_declaration_and_keeps_its_rows(
    install, conversation
):
    install(with_documents("alpha", "notes", "todo"))
    conversation("c1")
    assert write(lambda c: c.document("todo").update("c1", lambda n: Note(text="x"))).ok

    install(with_documents("alpha", "notes", version="2.0.0"))

    assert declared() == [("alpha", "notes")]
    assert ExtensionDocument.objects.filter(name="todo", conversation_id="c1").exists()


def test_a_fork_copies_a_document_whose_declaration_a_version_dropped(install, conversation):
    """No declaration means the default policy, `copy`: a version that declares the name again
    finds it in the fork as in the parent."""
    install(with_documents("alpha", "kept", "dropped"))
    conversation("parent")
    conversation("child")
    for name in ("kept", "dropped"):
        assert write(lambda c, n=name: c.document(n).update("parent", lambda d: Note(text=n))).ok
    install(with_documents("alpha", "kept", version="2.0.0"))

    assert documents_fork(parent_id="parent", child_id="child") == 2

    install(with_documents("alpha", "kept", "dropped", version="3.0.0"))
    assert write(lambda c: c.document("dropped").read("child")).value == Note(text="dropped")


def test_declaring_one_extensions_documents_keeps_the_other_extensions_declarations(install):
    install(with_documents("alpha", "notes"), with_documents("beta", "todo"))

    assert declared() == [("alpha", "notes"), ("beta", "todo")]


# --- quotas -----------------------------------------------------------------------------------


def test_a_record_within_the_frame_is_counted_against_the_record_quota(alpha):
    set_quotas("alpha", max_records=2)

    outcome = write(lambda c: [put(k)(c) for k in "abc"])

    assert outcome.error.kind == "bound"
    assert "max_records" in outcome.error.message
    assert not ExtensionRecord.objects.exists()


def test_bytes_written_earlier_in_the_frame_count_against_the_byte_quota(alpha):
    set_quotas("alpha", max_bytes=2 * size_of("a", "x" * 50) + 10)

    outcome = write(lambda c: [put(k, "x" * 50)(c) for k in "abc"])

    assert outcome.error.kind == "bound"
    assert "max_bytes" in outcome.error.message
    assert usage_totals(extension_id="alpha") == (0, 0)


def test_a_write_that_reaches_the_byte_quota_exactly_is_allowed(alpha):
    set_quotas("alpha", max_bytes=size_of("a") + size_of("b"))

    assert write(put("a")).ok
    assert write(put("b")).ok
    assert write(put("c")).error.kind == "bound"
    assert usage_totals(extension_id="alpha") == (2, size_of("a") + size_of("b"))


def test_replacing_and_removing_records_still_work_over_a_lowered_quota(alpha):
    """Staff may lower a quota below the usage: writes that add nothing are still allowed."""
    assert write(lambda c: [put(k)(c) for k in "abc"]).ok
    set_quotas("alpha", max_records=1, max_bytes=1)

    assert write(put("a")).ok  # same size: adds no record and no byte
    assert write(lambda c: c.collection("item").remove("b")).ok
    assert write(put("d")).error.kind == "bound"
    assert usage_totals(extension_id="alpha") == (2, size_of("a") + size_of("c"))


def test_replacing_a_record_with_a_larger_value_adds_the_difference_to_the_usage(alpha):
    assert write(put("k")).ok

    assert write(put("k", "x" * 40)).ok

    assert usage_totals(extension_id="alpha") == (1, size_of("k", "x" * 40))


def test_usage_is_counted_when_the_extensions_slot_rows_are_missing(alpha):
    UsageSlot.objects.filter(extension_id="alpha").delete()

    assert write(put("k")).ok

    assert usage_totals(extension_id="alpha") == (1, size_of("k"))


def page_of_writes(*writes: tuple[str, str]) -> list[Any]:
    """Run one frame per `(extension, key)` in one page; their outcomes."""

    def body(page: Any) -> list[Any]:
        return [
            run_frame(
                extension_id=extension_id,
                hook="test",
                call=put(key),
                page=page,
                failures="return",
            )
            for extension_id, key in writes
        ]

    return run_page(body, time_limit_s=10)


def test_usage_of_every_frame_of_a_page_is_added_at_its_end(install):
    install(make_ext("alpha"), make_ext("beta"))

    outcomes = page_of_writes(("alpha", "a1"), ("beta", "b1"), ("alpha", "a2"), ("alpha", "a3"))

    assert [outcome.ok for outcome in outcomes] == [True] * 4
    assert usage_totals(extension_id="alpha") == (3, size_of("a1") * 3)
    assert usage_totals(extension_id="beta") == (1, size_of("b1"))


def test_a_frame_of_a_page_sees_the_usage_of_the_pages_earlier_frames(install):
    install(make_ext("alpha"))
    set_quotas("alpha", max_records=2)

    outcomes = page_of_writes(("alpha", "a1"), ("alpha", "a2"), ("alpha", "a3"))

    assert [outcome.ok for outcome in outcomes] == [True, True, False]
    assert outcomes[2].error.kind == "bound"
    assert sorted(ExtensionRecord.objects.values_list("key", flat=True)) == ["a1", "a2"]
    assert usage_totals(extension_id="alpha") == (2, size_of("a1") * 2)


def test_a_frame_that_only_grows_a_record_in_a_page_adds_its_bytes_to_the_usage(install):
    install(make_ext("alpha"))
    assert write(put("k")).ok

    def body(page: Any) -> Any:
        return run_frame(
            extension_id="alpha", hook="test", call=put("k", "x" * 40), page=page, failures="return"
        )

    assert run_page(body, time_limit_s=10).ok
    assert usage_totals(extension_id="alpha") == (1, size_of("k", "x" * 40))


@pytest.mark.parametrize(
    ("stored", "max_records", "max_bytes"),
    [
        ({"max_records": "many", "max_bytes": 5}, None, 5),
        ({"max_records": -1, "max_bytes": True}, None, None),
        (["max_records"], None, None),
    ],
)
def test_the_extension_detail_shows_global_limits_where_stored_overrides_are_garbage(
    install, api, staff, settings, stored, max_records, max_bytes
):
    install(make_ext("alpha"))
    RosterEntry.objects.filter(pk="alpha").update(quotas=stored)

    response = api(staff).get("/v1/extensions/alpha")

    assert response.status_code == 200
    assert response.json()["usage"]["max_records"] == (
        settings.HOST_QUOTAS["max_records"] if max_records is None else max_records
    )
    assert response.json()["usage"]["max_bytes"] == (
        settings.HOST_QUOTAS["max_bytes"] if max_bytes is None else max_bytes
    )


def test_an_unknown_quota_is_reported_once_whatever_its_value():
    assert quotas_problems({"max_recrods": -1}) == [MSG_QUOTA_UNKNOWN.format(name="'max_recrods'")]
