"""`core.permissions.RuntimeOrAdmin` (skill files): the runtime or staff; anyone else is refused
with the shared vocabulary."""

from __future__ import annotations

import pytest

from core.errors import MSG_FORBIDDEN, MSG_UNAUTHENTICATED
from core.permissions import RuntimeOrAdmin
from extensions_host.contributions.api import SkillFileApi

pytestmark = pytest.mark.django_db

PATH = "/v1/skills/nobody/none/SKILL.md"


def test_the_skill_file_view_uses_the_shared_permission():
    assert SkillFileApi.permission_classes == [RuntimeOrAdmin]


@pytest.mark.parametrize(
    ("who", "status", "message"),
    [
        ("anonymous", 401, MSG_UNAUTHENTICATED),
        ("owner", 403, MSG_FORBIDDEN),
        ("owner-read", 403, MSG_FORBIDDEN),
    ],
)
def test_a_user_or_an_anonymous_caller_is_refused(client_for, who, status, message):
    persona, _, scope = who.partition("-")
    response = client_for(persona, scope=scope or "write").get(PATH)
    assert response.status_code == status
    assert response.json()["error"]["message"] == message


@pytest.mark.parametrize("who", ["service", "owner-runtime", "admin"])
def test_the_runtime_and_staff_get_past_the_permission(client_for, who):
    persona, _, scope = who.partition("-")
    # past the permission, a missing skill is simply not found
    assert client_for(persona, scope=scope or "write").get(PATH).status_code == 404
