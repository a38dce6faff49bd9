"""`manage.py sync_roster`: bring the roster in line with the installed extensions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from extensions_host.registry import ExtensionLoadError
from extensions_host.services.roster import roster_sync


class Command(BaseCommand):
    help = "Sync the extension roster: revisions, migrations, documents, uninstalled extensions."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = roster_sync()
        except ExtensionLoadError as exc:
            raise CommandError(str(exc)) from exc
        for extension_id in report.installed:
            self.stdout.write(f"installed {extension_id}")
        for extension_id in report.new_revision:
            self.stdout.write(f"new revision {extension_id}")
        for extension_id in report.kept_stopped:
            self.stdout.write(f"still stopped {extension_id}")
        for extension_id, reason in report.stopped.items():
            self.stdout.write(self.style.ERROR(f"stopped {extension_id}: {reason}"))
        for extension_id in report.uninstalled:
            self.stdout.write(f"uninstalled {extension_id}")
        self.stdout.write(self.style.SUCCESS("roster synced"))
