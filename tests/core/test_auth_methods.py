from __future__ import annotations

import ipaddress

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

PROXY_HEADERS = {
    "HTTP_X_FORWARDED_USER": "mallory",
    "HTTP_X_FORWARDED_EMAIL": "m@example.com",
    "HTTP_X_FORWARDED_GROUPS": "admin",
}


@pytest.fixture
def proxy_enabled(settings):
    settings.HOST_PROXY_AUTH = True
    settings.HOST_TRUSTED_PROXIES = [ipaddress.ip_network("10.0.0.0/8")]


def test_forward_auth_headers_from_a_trusted_proxy_authenticate(proxy_enabled):
    response = APIClient().get("/v1/auth/tokens", REMOTE_ADDR="10.1.2.3", **PROXY_HEADERS)
    assert response.status_code == 200
    assert get_user_model().objects.filter(username="mallory").exists()


def test_forward_auth_headers_from_an_untrusted_address_are_ignored(proxy_enabled):
    response = APIClient().get("/v1/auth/tokens", REMOTE_ADDR="192.0.2.7", **PROXY_HEADERS)
    assert response.status_code == 401
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_forward_auth_headers_are_ignored_when_proxy_auth_is_off(settings):
    settings.HOST_PROXY_AUTH = False
    settings.HOST_TRUSTED_PROXIES = [ipaddress.ip_network("0.0.0.0/0")]
    response = APIClient().get("/v1/auth/tokens", REMOTE_ADDR="10.1.2.3", **PROXY_HEADERS)
    assert response.status_code == 401


def test_host_auth_none_acts_as_the_local_dev_admin(settings):
    settings.HOST_AUTH = "none"
    response = APIClient().post("/v1/auth/tokens", {"name": "dev"}, format="json")
    assert response.status_code == 201
    assert get_user_model().objects.get(username="dev").is_superuser


def test_session_writes_need_csrf(owner):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.get("/v1/auth/tokens").status_code == 200
    response = client.post("/v1/auth/tokens", {"name": "x"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["cause"] == "forbidden"


def test_anonymous_requests_get_401_with_www_authenticate():
    response = APIClient().get("/v1/auth/tokens")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="hyphae"'
    assert response.json() == {
        "error": {
            "category": "auth",
            "cause": "unauthenticated",
            "message": "Authentication required",
        }
    }


@pytest.fixture
def active_extension_user(install):
    """An extension's own user still active (made before they were created inactive, or
    reactivated by staff): the name alone must keep every sign-in method out."""
    from extensions_host.sdk import Extension
    from extensions_host.services.roster import extension_user

    install(Extension(id="nudger", version="1"))
    user = extension_user("nudger")
    get_user_model().objects.filter(pk=user.pk).update(is_active=True)
    user.refresh_from_db()
    return user


def test_an_extensions_own_user_is_not_signed_in_by_a_session(active_extension_user):
    client = APIClient()
    client.force_login(active_extension_user)
    assert client.get("/v1/auth/tokens").status_code == 401


def test_an_extensions_own_user_is_not_signed_in_by_an_api_token(active_extension_user):
    from core.auth import token_new
    from core.models import ApiToken

    raw, prefix, digest = token_new()  # a token made before tokens were refused to it
    ApiToken.objects.create(user=active_extension_user, prefix=prefix, digest=digest)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/v1/auth/tokens").status_code == 401


def test_no_token_is_made_for_an_extensions_own_user(active_extension_user):
    from core.errors import HostError
    from core.models import ApiToken
    from core.services import MSG_NO_SIGN_IN, token_create

    with pytest.raises(HostError) as refused:
        token_create(user=active_extension_user, name="x", scope="write", expires_at=None)
    assert (refused.value.cause, refused.value.message) == ("forbidden", MSG_NO_SIGN_IN)
    assert not ApiToken.objects.filter(user=active_extension_user).exists()
