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
