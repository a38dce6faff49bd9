"""`manage.py sync_roster`: bring the roster in line with the installed extensions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from extensions_host.registry import ExtensionLoadError
from extensions_host.selectors import grants_waiting
from extensions_host.services.roster import roster_sync

HOW_TO_ADMIT = (
    "until staff admit them, what those grants gate does not run: "
    "`manage.py admit_grants <extension> [--grant <grant> …]` (every requested grant by "
    "default), or the admin (Extensions, action “Admit every requested grant”)"
)


class Command(BaseCommand):
    help = "Sync the extension roster: revisions, migrations, documents, uninstalled extensions."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = roster_sync()
        except ExtensionLoadError as exc:
            raise CommandError(str(exc)) from exc
        waiting = grants_waiting()
        unlisted = dict(waiting)  # waiting, and not on a line of this sync's changes

        def line(what: str, extension_id: str) -> str:
            grants = unlisted.pop(extension_id, None)
            return f"{what} {extension_id}" + (
                f", waiting for grants: {', '.join(grants)}" if grants else ""
            )

        for extension_id in report.installed:
            self.stdout.write(line("installed", extension_id))
        for extension_id in report.new_revision:
            self.stdout.write(line("new revision", extension_id))
        for extension_id in report.kept_stopped:
            self.stdout.write(f"still stopped {extension_id}")
        for extension_id, reason in report.stopped.items():
            self.stdout.write(self.style.ERROR(f"stopped {extension_id}: {reason}"))
        for extension_id in report.uninstalled:
            self.stdout.write(f"uninstalled {extension_id}")
        for extension_id, grants in unlisted.items():
            self.stdout.write(f"{extension_id} waiting for grants: {', '.join(grants)}")
        self.stdout.write(self.style.SUCCESS("roster synced"))
        if waiting:
            self.stdout.write(self.style.WARNING(HOW_TO_ADMIT))
