"""The real servers the security tests go through start with their defaults (the roster sync
at start included: uvicorn imports the app inside its event loop, where Django refuses the ORM
unless the sync runs on a thread of its own)."""

from __future__ import annotations

import pytest

from tests.security.live import SERVERS

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("kind", ["gunicorn", "uvicorn"])
def test_a_server_starts_with_the_roster_sync_at_start_on(tmp_path, kind):
    with SERVERS[kind](tmp_path, HOST_SYNC_AT_START="true") as server:
        assert "Traceback" not in server.output()
