"""Prepare a local (embedded) installation for `make run`: folders, an admin, a service token.

Idempotent: a second run reuses the database, keeps the admin's password and the token, and
prints how to log in again.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from conversations.models import Conversation
from conversations.services import submission_submit
from core import clock

ADMIN_USERNAME = "admin"


class Command(BaseCommand):
    help = "Create local folders, the admin user, a service token and the demo conversation."

    def handle(self, *args: Any, **options: Any) -> None:
        var = Path(settings.VAR_DIR)
        for sub in ("broker/queue", "broker/processed", "cache", "data"):
            (var / sub).mkdir(parents=True, exist_ok=True)
        settings.HOST_DATA_DIR.mkdir(parents=True, exist_ok=True)

        token = self._service_token(var / "local.env")
        password = self._admin()
        self._demo_conversation()
        demo = self._demo_extensions()

        url = "http://127.0.0.1:8000"
        out = self.stdout
        out.write("")
        out.write(self.style.SUCCESS("Hyphae is starting (embedded: SQLite + filesystem broker)"))
        out.write(f"  API docs:      {url}/v1/docs")
        out.write(f"  Admin:         {url}/admin/")
        if password:
            out.write(f"  Admin login:   {ADMIN_USERNAME} / {password}   (shown once; keep it)")
        else:
            out.write(
                f"  Admin login:   {ADMIN_USERNAME} / the password printed on the first run "
                f"(reset: .venv/bin/python manage.py changepassword {ADMIN_USERNAME})"
            )
        out.write(f"  Service token: {token}")
        out.write(
            f"  Try:           curl -H 'Authorization: Bearer {token}' {url}/v1/conversations"
        )
        out.write(f"  Inspector:     {url}/inspect/demo")
        for line in demo:
            out.write(f"  Demo:          {line}")
        out.write("")

    def _service_token(self, env_file: Path) -> str:
        lines = env_file.read_text().splitlines() if env_file.exists() else []
        for line in lines:
            if line.startswith("HOST_API_TOKEN="):
                return line.split("=", 1)[1].split(",")[0]
        token = "hys_" + secrets.token_urlsafe(32)
        env_file.write_text("\n".join([*lines, f"HOST_API_TOKEN={token}"]) + "\n")
        env_file.chmod(0o600)
        return token

    def _admin(self) -> str | None:
        users = get_user_model().objects
        if users.filter(username=ADMIN_USERNAME).exists():
            return None
        password = secrets.token_urlsafe(12)
        users.create_superuser(username=ADMIN_USERNAME, email="", password=password)
        return password

    def _demo_conversation(self) -> None:
        if Conversation.objects.filter(pk="demo").exists():
            return
        from conversations import services
        from core.auth import user_principal

        admin = get_user_model().objects.get(username=ADMIN_USERNAME)
        services.conversation_create(
            principal=user_principal(admin, "session"),
            conversation_id="demo",
            name="Demo conversation",
            source="web",
        )

    def _demo_extensions(self) -> list[str]:
        """What the bundled example extensions show in the demo conversation: a reminder due a
        minute from now, an approval waiting, and a first message whose settled run starts the
        digest (its section then reaches every later claim). Each step runs once, through the
        same services as the API; an audit entry marks it done, so a second run changes
        nothing. Steps of extensions that are not installed are skipped."""
        from core.auth import user_principal
        from core.errors import HostError
        from core.models import AuditEntry
        from core.services import audit_record
        from extensions_host import registry
        from extensions_host.services.commands import command_call

        admin = get_user_model().objects.get(username=ADMIN_USERNAME)
        principal = user_principal(admin, "session")

        def command(extension_id: str, name: str, body: dict[str, Any]) -> Any:
            return command_call(
                principal=principal,
                extension_id=extension_id,
                name=name,
                scope="conversation",
                conversation_id="demo",
                body=body,
            ).body

        def remind() -> str:
            result = command(
                "reminders",
                "remind",
                {"text": "Stretch your legs and look away from the screen", "in_seconds": 60},
            )
            due = clock.from_ms(result["due_at"]).strftime("%H:%M:%S UTC")
            return f"a reminder is due at {due}, a minute from now (reminders)"

        def approve() -> str:
            command(
                "approvals",
                "request",
                {
                    "title": "Publish the demo release notes?",
                    "detail": "Answer in the inspector, or POST /v1/conversations/demo/"
                    'interactions/<call_id>/answer with {"answer": "approve"}.',
                },
            )
            return "an approval is waiting for your answer (approvals)"

        def welcome() -> str:
            submission_submit(
                principal=principal,
                conversation_id="demo",
                parts=[{"type": "text", "text": "Hello! What does this demo show?"}],
                request_id="demo-welcome",
            )
            return (
                "the echo answers this prompt; from the next answer on they list the"
                " digest.summary prompt section (digest)"
            )

        steps = (("reminders", remind), ("approvals", approve), ("digest", welcome))
        installed = registry.loaded()
        lines = []
        for extension_id, step in steps:
            target = f"demo:{extension_id}"
            if extension_id not in installed:
                continue
            if AuditEntry.objects.filter(action="demo_setup", target=target).exists():
                continue
            try:
                lines.append(step())
            except HostError as exc:  # not admitted (HOST_AUTO_ADMIT=false), stopped, …
                self.stderr.write(f"demo: {extension_id} skipped: {exc.message}")
                continue
            audit_record(actor="bootstrap", action="demo_setup", target=target)
        return lines
