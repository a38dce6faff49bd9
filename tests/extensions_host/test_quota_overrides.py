"""Per-extension quota overrides as stored: the parser frames use tolerates anything stored."""

from __future__ import annotations

import pytest

from extensions_host.models import RosterEntry
from extensions_host.services.quotas import (
    MSG_QUOTA_NOT_COUNT,
    MSG_QUOTA_UNKNOWN,
    MSG_QUOTAS_NOT_OBJECT,
    quota_limit,
    quotas_parsed,
    quotas_problems,
)

from .exts import make_ext

GARBAGE = {
    "max_records": 5,
    "max_bytes": -1,
    "max_timers": True,
    "max_attention": "7",
    "nope": 3,
}


@pytest.mark.parametrize("stored", [None, [], ["max_records"], "max_records", 7, 1.5, True])
def test_stored_quotas_that_are_not_an_object_parse_as_no_overrides(stored):
    assert quotas_parsed(stored) == {}
    assert quotas_problems(stored) == ([] if stored is None else [MSG_QUOTAS_NOT_OBJECT])


def test_only_known_quotas_with_non_negative_integer_values_are_kept():
    parsed = quotas_parsed(GARBAGE)

    assert parsed == {"max_records": 5}
    assert quota_limit(overrides=parsed, name="max_records") == 5
    assert quotas_problems(GARBAGE) == [
        MSG_QUOTA_NOT_COUNT.format(name="max_bytes"),
        MSG_QUOTA_NOT_COUNT.format(name="max_timers"),
        MSG_QUOTA_NOT_COUNT.format(name="max_attention"),
        MSG_QUOTA_UNKNOWN.format(name="'nope'"),
    ]


def test_valid_overrides_parse_unchanged_and_have_no_problems():
    overrides = {"max_records": 0, "max_bytes": 10, "max_timers": 2, "max_attention": 1}

    assert quotas_parsed(overrides) == overrides
    assert quotas_problems(overrides) == []


def test_an_unknown_quota_name_is_cut_in_its_message():
    problems = quotas_problems({"x" * 1000: 1})

    assert problems == [MSG_QUOTA_UNKNOWN.format(name=repr("x" * 64))]


@pytest.mark.parametrize("stored", [["max_records"], {"max_records": "many"}])
def test_the_console_renders_with_garbage_stored(install, client, staff, stored):
    install(make_ext("alpha"))
    RosterEntry.objects.filter(pk="alpha").update(quotas=stored)
    client.force_login(staff)

    listing = client.get("/admin/extensions_host/rosterentry/")
    detail = client.get("/admin/extensions_host/rosterentry/alpha/change/")

    assert listing.status_code == 200 and detail.status_code == 200
