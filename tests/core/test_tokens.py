from __future__ import annotations

import base64
import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from core.errors import HostError
from core.models import ApiToken
from core.services import MSG_OUTLIVES_TOKEN, MSG_RUNTIME_SCOPE, token_create

pytestmark = pytest.mark.django_db


def test_a_created_token_authenticates_and_is_stored_only_as_a_digest(api, owner):
    response = api(owner).post(
        "/v1/auth/tokens", {"name": "laptop", "scope": "read"}, format="json"
    )
    assert response.status_code == 201
    raw = response.json()["token"]
    row = ApiToken.objects.get(pk=response.json()["id"])
    assert raw not in (row.digest, row.prefix)
    assert raw.startswith(row.prefix)
    client = api(None)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    listing = client.get("/v1/auth/tokens")
    assert listing.status_code == 200
    results = listing.json()["results"]
    assert [t["prefix"] for t in results] == [
        row.prefix,
        *[t.prefix for t in ApiToken.objects.filter(user=owner).exclude(pk=row.pk)],
    ]
    assert "token" not in results[0]


def test_a_read_token_cannot_write(api, owner):
    response = api(owner, scope="read").post("/v1/auth/tokens", {}, format="json")
    assert response.status_code == 403
    assert response.json()["error"] == {
        "category": "auth",
        "cause": "forbidden",
        "message": "Not allowed",
    }


def test_a_revoked_or_expired_token_is_refused_with_401(api, owner):
    client = api(owner)
    token = ApiToken.objects.get(user=owner)
    assert client.delete(f"/v1/auth/tokens/{token.pk}").status_code == 204
    response = client.get("/v1/auth/tokens")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    client2 = api(owner)
    ApiToken.objects.filter(revoked_at__isnull=True).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert client2.get("/v1/auth/tokens").status_code == 401


def test_a_deactivated_users_token_is_refused_with_401(api, owner):
    client = api(owner)
    assert client.get("/v1/auth/tokens").status_code == 200
    owner.is_active = False
    owner.save(update_fields=["is_active"])

    response = client.get("/v1/auth/tokens")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["category"] == "auth"
    assert ApiToken.objects.get(user=owner).revoked_at is None  # refused, not revoked


def test_another_users_token_cannot_be_revoked(api, owner, outsider):
    api(owner)
    token = ApiToken.objects.get(user=owner)
    response = api(outsider).delete(f"/v1/auth/tokens/{token.pk}")
    assert response.status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_unknown_fields_are_rejected(api, owner):
    response = api(owner).post("/v1/auth/tokens", {"name": "x", "user": 1}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"user": ["Unknown field."]}
    assert not ApiToken.objects.filter(name="x").exists()


def _session(user) -> APIClient:
    client = APIClient()
    client.force_login(user)  # a session login (forward auth gives the same principal kind)
    return client


def test_a_plain_user_cannot_mint_a_runtime_token(api, member):
    """`runtime` acts for the platform (the runtime endpoints ignore sharing): a plain user's
    session or token gets 403 naming the rule, and nothing is written."""
    before = ApiToken.objects.count()
    for client in (_session(member), api(member)):
        response = client.post("/v1/auth/tokens", {"scope": "runtime"}, format="json")
        assert response.status_code == 403, response.content
        assert response.json()["error"] == {
            "category": "auth",
            "cause": "forbidden",
            "message": MSG_RUNTIME_SCOPE,
        }
    assert ApiToken.objects.count() == before + 1  # only api(member)'s own write token
    assert not ApiToken.objects.filter(scope="runtime").exists()
    minted = _session(member).post("/v1/auth/tokens", {"scope": "write"}, format="json")
    assert minted.status_code == 201  # the narrower scopes stay open to everyone


def test_staff_and_runtime_principals_may_mint_a_runtime_token(api, member, staff):
    for client in (_session(staff), api("service"), api(member, scope="runtime")):
        response = client.post("/v1/auth/tokens", {"scope": "runtime"}, format="json")
        assert response.status_code == 201, response.content
        assert response.json()["scope"] == "runtime"


@pytest.mark.parametrize("scope", ["read", "write"])
def test_a_token_never_mints_a_wider_one_even_for_staff(api, staff, scope):
    client = api(staff, scope=scope)
    response = client.post("/v1/auth/tokens", {"scope": "runtime"}, format="json")
    assert response.status_code == 403
    assert not ApiToken.objects.filter(scope="runtime").exists()


def test_a_short_lived_token_cannot_mint_a_token_that_outlives_it(owner):
    lifetime_end = timezone.now() + dt.timedelta(hours=1)
    _, raw = token_create(user=owner, name="short", scope="write", expires_at=lifetime_end)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    later = (lifetime_end + dt.timedelta(hours=1)).isoformat()
    sooner = (lifetime_end - dt.timedelta(minutes=30)).isoformat()

    forever = client.post("/v1/auth/tokens", {"name": "forever"}, format="json")
    longer = client.post("/v1/auth/tokens", {"name": "longer", "expires_at": later}, format="json")
    within = client.post("/v1/auth/tokens", {"name": "within", "expires_at": sooner}, format="json")

    for refused in (forever, longer):
        assert refused.status_code == 403
        assert refused.json()["error"]["message"] == MSG_OUTLIVES_TOKEN
    assert within.status_code == 201, within.content
    assert set(ApiToken.objects.filter(user=owner).values_list("name", flat=True)) == {
        "short",
        "within",
    }


def test_a_session_may_still_mint_a_token_that_never_expires(owner):
    response = _session(owner).post("/v1/auth/tokens", {"name": "forever"}, format="json")

    assert response.status_code == 201
    assert response.json()["expires_at"] is None


def test_revoking_with_unknown_body_fields_is_a_400_and_revokes_nothing(api, owner):
    client = api(owner)
    token = ApiToken.objects.get(user=owner)
    response = client.delete(f"/v1/auth/tokens/{token.pk}", {"bogus": 1}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"bogus": ["Unknown field."]}
    token.refresh_from_db()
    assert token.revoked_at is None
    assert client.delete(f"/v1/auth/tokens/{token.pk}", {}, format="json").status_code == 204


@pytest.mark.parametrize("token_id", ["theirs", "missing"])
def test_revoking_a_token_one_may_not_see_is_a_404_before_the_body_is_read(
    api, owner, outsider, token_id
):
    """The lookup comes first (404), then the body (400), as for every write."""
    api(owner)
    theirs = ApiToken.objects.get(user=owner)
    pk = theirs.pk if token_id == "theirs" else theirs.pk + 1000
    response = api(outsider).delete(f"/v1/auth/tokens/{pk}", {"bogus": 1}, format="json")
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_both_service_tokens_work_for_rotation(api):
    from rest_framework.test import APIClient

    for token in ("test-service-token", "test-service-token-next"):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        assert client.get("/v1/auth/tokens").status_code == 200
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer wrong")
    assert client.get("/v1/auth/tokens").status_code == 401


def test_healthz_is_public(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_the_token_list_is_cursor_paginated_newest_first(api, owner, outsider):
    client = api(owner)  # its own token is the oldest
    for n in range(4):
        token_create(user=owner, name=f"t{n}", scope="read", expires_at=None)
    api(outsider)
    mine = list(ApiToken.objects.filter(user=owner).order_by("-id").values_list("pk", flat=True))
    first = client.get("/v1/auth/tokens", {"limit": 2})
    assert first.status_code == 200
    body = first.json()
    assert set(body) == {"next", "previous", "results"}
    assert [t["id"] for t in body["results"]] == mine[:2]
    seen = [t["id"] for t in body["results"]]
    url = body["next"]
    while url:
        page = client.get(url).json()
        seen += [t["id"] for t in page["results"]]
        url = page["next"]
    assert seen == mine
    assert [t["id"] for t in client.get("/v1/auth/tokens").json()["results"]] == mine


@pytest.mark.parametrize("query", ["limit=101", "limit=0", "limit=abc", "limit="])
def test_a_token_list_limit_out_of_bounds_is_a_400(api, owner, query):
    response = api(owner).get(f"/v1/auth/tokens?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["cause"] == "invalid"
    assert "limit" in response.json()["error"]["details"]


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "%00",
        "a%00b",
        base64.b64encode(b"p=abc").decode(),
        base64.b64encode(b"p=99999999999999999999999").decode(),
        base64.b64encode(b"p=%00").decode(),
        base64.b64encode(b"p=-1").decode(),
    ],
)
def test_a_forged_token_list_cursor_is_a_400(api, owner, cursor):
    response = api(owner).get(f"/v1/auth/tokens?cursor={cursor}")
    assert response.status_code == 400, response.content
    assert "cursor" in response.json()["error"]["details"]


def test_token_expiry_is_judged_on_the_host_clock(api, owner, fake_clock):
    """Spec 02 §6: expiry is a due time, compared on the one injectable host clock."""
    from rest_framework.test import APIClient

    from core import clock

    fake_clock.set(clock.to_ms(timezone.now() + dt.timedelta(days=3650)))  # far ahead of the wall
    _, raw = token_create(
        user=owner, name="soon", scope="read", expires_at=clock.now() + dt.timedelta(hours=1)
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/v1/auth/tokens").status_code == 200
    fake_clock.advance(seconds=3600)
    assert client.get("/v1/auth/tokens").status_code == 401


def test_a_token_expiring_after_the_host_clocks_now_can_be_created_and_used(owner, fake_clock):
    from rest_framework.test import APIClient

    from core import clock

    fake_clock.set(clock.to_ms(timezone.now() - dt.timedelta(days=3650)))  # far behind the wall
    expires = clock.now() + dt.timedelta(hours=1)
    _, raw = token_create(user=owner, name="later", scope="read", expires_at=expires)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/v1/auth/tokens").status_code == 200
    with pytest.raises(HostError) as refused:
        token_create(user=owner, name="past", scope="read", expires_at=clock.now())
    assert refused.value.message == "Token expiry must be in the future"
