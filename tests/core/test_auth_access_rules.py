"""The rules of `core.auth` (principals from each method), `core.access` (owner | read | none)
and the request middleware that the broader suites do not pin down one by one (spec 05, first
section; spec 01, access)."""

from __future__ import annotations

import datetime as dt
import ipaddress

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from core import clock
from core.models import ApiToken
from core.services import token_create
from tests.conftest import SERVICE_TOKEN

pytestmark = pytest.mark.django_db


def bearer(raw: str, scheme: str = "Bearer") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {raw}")
    return client


def principal(client: APIClient, **extra) -> dict:
    response = client.get("/v1/auth/check", **extra)
    assert response.status_code == 200, response.content
    return response.json()["principal"]


def conversation(client: APIClient, sharing: str = "private") -> str:
    response = client.post(
        "/v1/conversations", {"name": "before", "sharing": sharing}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


# --- service tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [SERVICE_TOKEN[:-1], SERVICE_TOKEN[:4], SERVICE_TOKEN + "x", SERVICE_TOKEN.upper()],
    ids=["shorter", "prefix", "longer", "other-case"],
)
def test_only_the_whole_service_token_signs_in_as_the_service(raw):
    response = bearer(raw).get("/v1/auth/check")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="hyphae"'


def test_the_bearer_scheme_is_read_case_insensitively():
    """RFC 9110 §11.1: an authentication scheme's name is case-insensitive."""
    for scheme in ("bearer", "BEARER"):
        assert principal(bearer(SERVICE_TOKEN, scheme))["method"] == "service"


# --- per-user tokens ---------------------------------------------------------------------------


def test_a_read_token_cannot_change_its_users_own_conversation(api, owner):
    cid = conversation(api(owner))
    response = api(owner, scope="read").patch(
        f"/v1/conversations/{cid}", {"name": "after"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["cause"] == "forbidden"
    assert api(owner).get(f"/v1/conversations/{cid}").json()["name"] == "before"


def test_a_tokens_last_use_is_recorded_at_most_once_a_minute(owner, fake_clock):
    _, raw = token_create(user=owner, name="t", scope="read", expires_at=None)
    client = bearer(raw)
    token = ApiToken.objects.get(user=owner)
    assert token.last_used_at is None

    first = clock.now()
    assert client.get("/v1/auth/tokens").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at == first

    fake_clock.advance(seconds=60)
    assert client.get("/v1/auth/tokens").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at == first  # within the minute: no write

    fake_clock.advance(seconds=1)
    assert client.get("/v1/auth/tokens").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at == first + dt.timedelta(seconds=61)


# --- who is an admin ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags", [{"is_staff": True}, {"is_superuser": True}], ids=["staff", "superuser"]
)
def test_staff_or_a_superuser_is_an_admin_and_reads_a_foreign_private_conversation(
    api, owner, make_user, flags
):
    cid = conversation(api(owner))
    admin = api(make_user("boss", **flags))
    assert principal(admin)["admin"] is True
    assert admin.get(f"/v1/conversations/{cid}").status_code == 200


def test_a_token_principal_names_its_method_and_scope(api, owner):
    seen = principal(api(owner, scope="read"))
    assert (seen["user"], seen["method"], seen["scope"], seen["admin"]) == (
        "owner",
        "token",
        "read",
        False,
    )


def test_an_empty_bearer_credential_is_no_credential_at_all(api, owner):
    """`Authorization: Bearer` with nothing after it is read as no Authorization header: a
    public conversation stays readable, a protected endpoint answers 401 as for anyone."""
    cid = conversation(api(owner), sharing="public")
    for header in ("Bearer", "Bearer    "):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        assert client.get(f"/v1/conversations/{cid}").status_code == 200
        assert client.get("/v1/auth/tokens").status_code == 401


# --- forward auth ------------------------------------------------------------------------------


@pytest.fixture
def proxy_on(settings):
    settings.HOST_PROXY_AUTH = True
    settings.HOST_TRUSTED_PROXIES = [
        ipaddress.ip_network("0.0.0.0/0"),
        ipaddress.ip_network("::/0"),
    ]


def forwarded(user: str, remote_addr: str = "10.1.2.3", **headers: str) -> dict[str, str]:
    extra = {"HTTP_X_FORWARDED_USER": user, "REMOTE_ADDR": remote_addr}
    extra.update({"HTTP_X_FORWARDED_" + k.upper(): v for k, v in headers.items()})
    return extra


@pytest.mark.parametrize("remote_addr", ["", "unix:/run/hyphae.sock", "10.1.2.3.4", "proxy"])
def test_forward_auth_from_an_address_that_is_not_an_ip_is_ignored(proxy_on, remote_addr):
    """Even when every IP address is trusted: no address, or one that does not parse, is not a
    trusted proxy."""
    response = APIClient().get("/v1/auth/check", **forwarded("mallory", remote_addr))
    assert response.status_code == 401
    assert not get_user_model().objects.filter(username="mallory").exists()


@pytest.mark.parametrize("length", [151, 400])
def test_a_forwarded_username_over_150_characters_is_refused_and_creates_nobody(proxy_on, length):
    response = APIClient().get("/v1/auth/check", **forwarded("u" * length))
    assert response.status_code == 401
    assert not get_user_model().objects.filter(username__startswith="uuu").exists()


def test_a_forwarded_username_of_150_characters_signs_in(proxy_on):
    assert principal(APIClient(), **forwarded("u" * 150))["user"] == "u" * 150


def test_a_forwarded_username_is_trimmed(proxy_on):
    assert principal(APIClient(), **forwarded("  alice  "))["user"] == "alice"
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["alice"]


def test_a_deactivated_user_cannot_sign_in_through_forward_auth(proxy_on, make_user):
    make_user("alice", is_active=False)
    response = APIClient().get("/v1/auth/check", **forwarded("alice"))
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("groups", "admin"),
    [
        (None, False),
        ("", False),
        ("users,staff", False),
        ("administrators", False),
        ("users, admin ", True),
        ("admin", True),
    ],
)
def test_forward_auth_makes_an_admin_only_of_the_admin_group(proxy_on, groups, admin):
    headers = {} if groups is None else {"groups": groups}
    assert principal(APIClient(), **forwarded("alice", **headers))["admin"] is admin


@pytest.mark.parametrize(
    "flags", [{"is_staff": True}, {"is_superuser": True}], ids=["staff", "superuser"]
)
def test_staff_or_a_superuser_is_an_admin_through_forward_auth_without_the_group(
    proxy_on, make_user, flags
):
    """The same rule as every other way of signing in."""
    make_user("alice", **flags)
    assert principal(APIClient(), **forwarded("alice", groups="users"))["admin"] is True


def test_forward_auth_takes_name_and_email_from_the_headers_else_the_account(proxy_on, make_user):
    make_user("alice", email="alice@example.com")
    plain = principal(APIClient(), **forwarded("alice"))
    assert (plain["name"], plain["email"], plain["method"]) == (
        "alice",
        "alice@example.com",
        "proxy",
    )
    named = principal(
        APIClient(), **forwarded("alice", preferred_username="Alice A.", email="a@corp.example")
    )
    assert (named["name"], named["email"]) == ("Alice A.", "a@corp.example")


def test_a_new_forwarded_user_keeps_bounded_email_and_name(proxy_on):
    email = "a" * 300 + "@example.com"
    name = "N" * 200
    seen = principal(APIClient(), **forwarded("alice", email=email, preferred_username=name))
    user = get_user_model().objects.get(username="alice")
    assert (user.email, user.first_name) == (email[:254], name[:150])
    assert (seen["email"], seen["name"]) == (email[:254], name[:150])


# --- HOST_AUTH=none ----------------------------------------------------------------------------


def test_host_auth_none_acts_as_a_staff_superuser_dev_account(settings):
    settings.HOST_AUTH = "none"
    seen = principal(APIClient())
    assert (seen["user"], seen["method"], seen["admin"]) == ("dev", "none", True)
    dev = get_user_model().objects.get(username="dev")
    assert (dev.is_staff, dev.is_superuser) == (True, True)


def test_without_host_auth_none_nobody_is_the_dev_account(settings):
    settings.HOST_AUTH = "on"
    assert APIClient().get("/v1/auth/check").status_code == 401
    assert not get_user_model().objects.filter(username="dev").exists()


# --- access_of ---------------------------------------------------------------------------------

ACCESS = {
    # who: (private, users, public)
    "anonymous": ("none", "none", "read"),
    "other": ("none", "read", "read"),
    "owner": ("owner", "owner", "owner"),
    "admin": ("owner", "owner", "owner"),
}


@pytest.mark.parametrize("who", sorted(ACCESS))
def test_access_follows_the_sharing_table(owner, member, staff, who):
    from core.access import access_of
    from core.auth import ANONYMOUS, user_principal

    principal_ = (
        ANONYMOUS
        if who == "anonymous"
        else user_principal({"other": member, "owner": owner, "admin": staff}[who], "token")
    )
    got = tuple(
        access_of(principal_, owner_id=owner.pk, sharing=s) for s in ("private", "users", "public")
    )
    assert got == ACCESS[who]


def test_an_anonymous_principal_never_owns_a_resource_without_an_owner():
    """An extension's record may name no (or no existing) owner: owner_id None must not match
    the anonymous principal's missing id."""
    from core.access import access_of
    from core.auth import ANONYMOUS

    assert access_of(ANONYMOUS, owner_id=None, sharing="private") == "none"
    assert access_of(ANONYMOUS, owner_id=None, sharing="users") == "none"
    assert access_of(ANONYMOUS, owner_id=None, sharing="public") == "read"


# --- request middleware ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("incoming", "echoed"),
    [
        ("t" * 64, True),
        ("trace id: 7/x", True),
        ("t" * 65, False),
        ("tab\there", False),
        ("caf\xc3\xa9", False),  # "café" in UTF-8, as WSGI hands it over (Latin-1)
    ],
    ids=["64-chars", "printable", "65-chars", "control-char", "not-ascii"],
)
def test_a_callers_request_id_is_kept_only_when_short_and_printable(incoming, echoed):
    response = APIClient().get("/healthz", HTTP_X_REQUEST_ID=incoming)
    assert (response["X-Request-Id"] == incoming) is echoed
    if not echoed:
        assert len(response["X-Request-Id"]) == 32  # a fresh one instead


def test_a_content_length_that_is_not_a_number_is_a_400_before_anything_runs(api, owner):
    response = api(owner).generic(
        "POST",
        "/v1/auth/tokens",
        b'{"name": "x"}',
        content_type="application/json",
        CONTENT_LENGTH="twelve",
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "category": "contract",
        "cause": "invalid",
        "message": "Content-Length is invalid",
    }
    assert not ApiToken.objects.filter(name="x").exists()


def test_the_longest_registered_prefix_decides_a_paths_body_limit(monkeypatch, settings):
    from core import middleware

    monkeypatch.setattr(middleware, "_BODY_LIMITS", [])
    middleware.body_limits_replace(
        "/v1/ext/a/",
        {"/v1/ext/a/big": 4096, "/v1/ext/a/": 2048, "/v1/ext/a/big/small": 1024},
    )
    assert middleware.body_limit_for("/v1/ext/a/big/x") == 4096
    assert middleware.body_limit_for("/v1/ext/a/big/small/x") == 1024
    assert middleware.body_limit_for("/v1/ext/a/other") == 2048
    assert middleware.body_limit_for("/v1/conversations") == settings.HOST_MAX_BODY_BYTES


def test_replacing_the_body_limits_under_a_prefix_drops_its_old_ones_only(monkeypatch, settings):
    """An extension loaded again keeps only its routes' limits as they are now; another
    extension's (`/v1/ext/ab/` is not under `/v1/ext/a/`) stay."""
    from core import middleware

    monkeypatch.setattr(middleware, "_BODY_LIMITS", [])
    middleware.body_limits_replace("/v1/ext/a/", {"/v1/ext/a/up": 16, "/v1/ext/a/gone": 8})
    middleware.body_limits_replace("/v1/ext/ab/", {"/v1/ext/ab/up": 32})
    middleware.body_limits_replace("/v1/ext/a/", {"/v1/ext/a/up": 1024})

    assert middleware.body_limit_for("/v1/ext/a/up") == 1024
    assert middleware.body_limit_for("/v1/ext/a/gone") == settings.HOST_MAX_BODY_BYTES
    assert middleware.body_limit_for("/v1/ext/ab/up") == 32


def test_a_raw_byte_that_is_not_utf_8_in_a_wsgi_query_is_a_400():
    """WSGI hands the query's bytes over as Latin-1 text: byte 0xFF arrives as "ÿ", which is
    no UTF-8 anyone sent."""
    from core.validation import PROBLEM_NOT_UNICODE

    response = APIClient().get("/healthz", QUERY_STRING="probe=\xff")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"probe": [PROBLEM_NOT_UNICODE]}


def test_an_extension_routes_query_is_left_to_its_handler():
    """No extension serves this path: the answer is the route's 404, not the query check's 400."""
    response = APIClient().get("/v1/ext/nobody/hook?payload=%FF&x=%00")
    assert response.status_code == 404


def test_a_repeated_query_problem_is_reported_once_per_parameter():
    from core.validation import PROBLEM_NUL

    response = APIClient().get("/healthz?probe=%00&probe=a%00&x%00=1&y%00=2")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"probe": [PROBLEM_NUL], "query": [PROBLEM_NUL]}


def asgi_post(size: int, settings) -> tuple[int, int]:
    """POST `size` bytes in 100-byte messages through `AsgiBodyLimit` to an app that reads the
    whole body: (status, bytes the app received)."""
    from asgiref.sync import async_to_sync

    from core.middleware import AsgiBodyLimit

    settings.HOST_MAX_BODY_BYTES = 1000
    chunks = [b"x" * min(100, size - start) for start in range(0, size, 100)] or [b""]
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    seen: dict[str, int] = {"received": 0}
    sent: list[dict] = []

    async def app(scope, receive, send):
        while True:
            message = await receive()
            seen["received"] += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/conversations", "headers": []}
    async_to_sync(AsgiBodyLimit(app))(scope, receive, send)
    return sent[0]["status"], seen["received"]


def test_asgi_a_body_of_exactly_the_limit_is_received_whole(settings):
    assert asgi_post(1000, settings) == (200, 1000)


def test_asgi_a_body_one_byte_over_the_limit_is_a_413(settings):
    status, received = asgi_post(1001, settings)
    assert status == 413
    assert received == 1000  # the message that went past the limit never reached the app
