"""Forward-auth headers are trusted only with HOST_PROXY_AUTH and from HOST_TRUSTED_PROXIES
(spec 05); from anywhere else they are ignored on every endpoint, including their underscore
spellings.

Django's WSGI environ maps `X-Forwarded-User` and `X_Forwarded_User` to the same
`HTTP_X_FORWARDED_USER`, so the test client cannot tell them apart: those cases go through a
real gunicorn server with raw headers. gunicorn (≥ 22, `header_map = "drop"`, the default the
Procfile and deploy examples keep) drops any header whose name contains an underscore, and
Django's ASGI handler (under uvicorn) skips them too, so a client cannot smuggle
`X_Forwarded_User` past a proxy that only strips `X-Forwarded-User`. Both servers are tested.
"""

from __future__ import annotations

import ipaddress

import httpx
import pytest
from django.contrib.auth import get_user_model

from tests.security.conftest import api_operations
from tests.security.live import SERVERS

SPOOF = {
    "HTTP_X_FORWARDED_USER": "mallory",
    "HTTP_X_FORWARDED_EMAIL": "mallory@example.com",
    "HTTP_X_FORWARDED_GROUPS": "admin",
    "HTTP_X_FORWARDED_PREFERRED_USERNAME": "Mallory",
    "HTTP_X_FORWARDED_FOR": "10.9.9.9",
}
# the event stream is async and long-lived: its auth is tested through uvicorn (tests/surfaces)
READS = [op for op in api_operations() if op.method == "get" and "x-streaming" not in op.extensions]
WRITES = [op for op in api_operations() if op.method in ("post", "put", "patch", "delete")]


def users_named(name: str) -> int:
    return get_user_model().objects.filter(username=name).count()


@pytest.fixture
def proxy_auth_on(settings):
    settings.HOST_PROXY_AUTH = True
    settings.HOST_TRUSTED_PROXIES = [ipaddress.ip_network("10.0.0.0/8")]


@pytest.mark.django_db
@pytest.mark.parametrize("operation", READS + WRITES, ids=str)
def test_spoofed_headers_from_an_untrusted_address_change_nothing_on_any_endpoint(
    proxy_auth_on, build_world, client_for, operation
):
    world = build_world("private")
    url = world.url(operation.path)
    anonymous = client_for("anonymous")
    call = getattr(anonymous, operation.method)
    plain = call(url, {}, format="json", REMOTE_ADDR="192.0.2.7")
    spoofed = call(url, {}, format="json", REMOTE_ADDR="192.0.2.7", **SPOOF)
    assert spoofed.status_code == plain.status_code, (spoofed.status_code, spoofed.content[:300])
    assert spoofed.status_code in (200, 204, 401, 404, 405, 503), spoofed.status_code
    assert users_named("mallory") == 0


@pytest.mark.django_db
def test_the_same_headers_from_a_trusted_proxy_do_authenticate(proxy_auth_on, client_for):
    """The control: the spoofing tests above would notice if the headers were honoured."""
    response = client_for("anonymous").get("/v1/auth/tokens", REMOTE_ADDR="10.1.2.3", **SPOOF)
    assert response.status_code == 200
    assert users_named("mallory") == 1


@pytest.mark.django_db
def test_an_extensions_own_user_cannot_sign_in_through_forward_auth(
    proxy_auth_on, install, client_for
):
    """Spec 04: the extension's user `ext:<id>` has no login; it owns all its extension made."""
    from conversations.models import Conversation
    from core import clock
    from extensions_host.sdk import Extension
    from extensions_host.services.roster import extension_user

    install(Extension(id="nudger", version="1", grants={"send"}))
    Conversation.objects.create(
        id="made-by-ext", owner=extension_user("nudger"), last_activity_at=clock.now()
    )
    anonymous = client_for("anonymous")

    def as_proxy_user(path: str, username: str) -> int:
        headers = {"HTTP_X_FORWARDED_USER": username, "HTTP_X_FORWARDED_GROUPS": "admin"}
        return anonymous.get(path, REMOTE_ADDR="10.1.2.3", **headers).status_code

    assert as_proxy_user("/v1/conversations/made-by-ext", "ext:nudger") == 401
    assert as_proxy_user("/v1/auth/tokens", "ext:nudger") == 401
    # nor a name no extension has yet: the user would become a later extension's own
    assert as_proxy_user("/v1/auth/tokens", "ext:later") == 401
    assert users_named("ext:later") == 0


def send(server, headers: list[tuple[str, str]], method: str = "GET", path: str = "/v1/auth/check"):
    with httpx.Client(base_url=server.url, timeout=10) as http:
        return http.request(method, path, headers=headers, json={} if method != "GET" else None)


SPELLINGS = ["X-Forwarded-User", "X_Forwarded_User", "x-forwarded-user", "X-FORWARDED-USER"]


def test_every_uvicorn_we_ship_ignores_x_forwarded_for():
    """uvicorn trusts X-Forwarded-For from 127.0.0.1 by default and rewrites the client address
    from it, so a loopback client could pose as a trusted proxy. HOST_TRUSTED_PROXIES is the
    host's own proxy trust: every uvicorn command we ship runs with --no-proxy-headers."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    commands = [
        line
        for path in (root / "Procfile", root / "docs" / "operating.md")
        for line in path.read_text().splitlines()
        if "uvicorn config.asgi" in line
    ]
    assert commands
    assert all("--no-proxy-headers" in line for line in commands)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "kind",
    [
        "gunicorn",
        "uvicorn --no-proxy-headers",
    ],
)
def test_through_a_real_server_no_spelling_is_trusted_from_an_untrusted_address(tmp_path, kind):
    serve = SERVERS[kind]
    with serve(tmp_path, HOST_PROXY_AUTH="true", HOST_TRUSTED_PROXIES="10.0.0.0/8") as server:
        for spelling in SPELLINGS:
            headers = [
                (spelling, "mallory"),
                (spelling.replace("User", "Groups").replace("USER", "GROUPS"), "admin"),
                ("X-Forwarded-For", "10.1.2.3"),  # never makes the peer a trusted proxy
            ]
            assert send(server, headers).status_code == 401, spelling
            assert send(server, headers, "POST", "/v1/conversations").status_code == 401
        assert "Traceback" not in server.output()
    assert users_named("mallory") == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", sorted(SERVERS))
def test_through_a_real_server_a_trusted_proxy_is_heard_only_with_dashes(tmp_path, kind):
    serve = SERVERS[kind]
    with serve(tmp_path, HOST_PROXY_AUTH="true", HOST_TRUSTED_PROXIES="127.0.0.1/32") as server:
        dashed = send(server, [("X-Forwarded-User", "alice")])
        assert dashed.status_code == 200
        assert dashed.json()["principal"]["method"] == "proxy"
        # underscore names are dropped: the proxy's own header is the only one that counts
        assert send(server, [("X_Forwarded_User", "mallory")]).status_code == 401
        both = send(server, [("X-Forwarded-User", "alice"), ("X_Forwarded_User", "mallory")])
        assert both.status_code == 200
        assert both.json()["principal"]["name"] == "alice"
        smuggled_admin = send(
            server, [("X-Forwarded-User", "alice"), ("X_Forwarded_Groups", "admin")]
        )
        assert smuggled_admin.json()["principal"]["admin"] is False
    assert users_named("mallory") == 0
    assert users_named("alice") == 1
