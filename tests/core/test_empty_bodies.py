"""Writes that take no body (`core.api_base.EmptyInputSerializer`): no body or `{}` is
accepted; any other JSON — not an object, or an object with fields — is a 400 before the
operation does anything (spec 07: unknown request fields are rejected, JSON in)."""

from __future__ import annotations

import pytest

from extensions_host.models import RosterEntry

pytestmark = pytest.mark.django_db

# admin writes on a missing extension or job: a body that passes is then a 404
ADMIN_WRITES = ["/v1/extensions/nope/resume", "/v1/jobs/ext:nope:job/trigger"]


@pytest.mark.parametrize("path", ADMIN_WRITES)
@pytest.mark.parametrize("raw", ["[]", "null", "false", "0", '""', "[1]", '{"force": true}'])
def test_an_admin_write_refuses_a_body_that_is_not_an_empty_object(api, staff, path, raw):
    response = api(staff).post(path, raw, content_type="application/json")
    assert response.status_code == 400, (response.status_code, response.content)
    assert response.json()["error"]["cause"] == "invalid"
    assert not RosterEntry.objects.exists()


@pytest.mark.parametrize("path", ADMIN_WRITES)
def test_an_admin_write_takes_no_body_or_an_empty_object(api, staff, path):
    client = api(staff)
    assert client.post(path).status_code == 404
    assert client.post(path, "{}", content_type="application/json").status_code == 404
