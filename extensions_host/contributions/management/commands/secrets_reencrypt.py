"""`manage.py secrets_reencrypt`: after rotating `HOST_SECRET_KEY` (the old value moved to
`HOST_SECRET_KEYS_OLD`), re-encrypt every extension secret under the current key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from extensions_host.contributions.services.stores import secrets_reencrypt


class Command(BaseCommand):
    help = "Re-encrypt every extension secret under the current HOST_SECRET_KEY."

    def handle(self, *args: Any, **options: Any) -> None:
        result = secrets_reencrypt()
        self.stdout.write(
            f"Re-encrypted {result['reencrypted']} secret(s); "
            f"{result['unreadable']} cannot be read with the configured keys."
        )
        if result["unreadable"]:
            raise CommandError("Some secrets cannot be decrypted: restore their key first")
