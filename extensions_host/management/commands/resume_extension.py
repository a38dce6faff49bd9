"""`manage.py resume_extension <id>`: resume a stopped extension (as staff would)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import HostError
from extensions_host.services.roster import extension_resume


class Command(BaseCommand):
    help = "Resume a stopped extension; resuming a running one changes nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("extension_id")
        parser.add_argument("--actor", default="manage.py", help="Who resumes (audit log).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            row = extension_resume(extension_id=options["extension_id"], actor=options["actor"])
        except HostError as exc:
            raise CommandError(exc.message) from exc
        message = f"{row.id} is {row.status}"
        if row.reason:
            message += f": {row.reason}"
        self.stdout.write(message)
