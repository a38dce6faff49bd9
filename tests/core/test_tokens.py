from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from core.models import ApiToken

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
    assert [t["prefix"] for t in listing.json()] == [
        row.prefix,
        *[t.prefix for t in ApiToken.objects.filter(user=owner).exclude(pk=row.pk)],
    ]
    assert "token" not in listing.json()[0]


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
