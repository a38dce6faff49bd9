"""`manage.py admit_grants <extension> [--grant g …]`: admit an extension's requested grants, as
staff do in the admin (the same service, audited) — for deploys that run without the admin."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import HostError
from extensions_host.models import RosterEntry
from extensions_host.selectors import roster_entry_get
from extensions_host.services.roster import extension_admit_grants


class Command(BaseCommand):
    help = (
        "Admit requested grants of an extension (every requested grant unless --grant is "
        "given); grants admitted before stay admitted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("extension_id")
        parser.add_argument(
            "--grant",
            action="append",
            default=[],
            dest="grants",
            help="A requested grant to admit (repeat for several; default: every one).",
        )
        parser.add_argument("--actor", default="manage.py", help="Who admits (audit log).")

    def handle(self, *args: Any, **options: Any) -> None:
        extension_id = options["extension_id"]
        try:
            row = roster_entry_get(extension_id=extension_id)
        except HostError:
            known = ", ".join(RosterEntry.objects.values_list("id", flat=True)) or "none"
            raise CommandError(
                f"Unknown extension {extension_id!r} (in the roster: {known})"
            ) from None
        wanted = set(options["grants"] or row.requested_grants)
        unrequested = sorted(wanted - set(row.requested_grants))
        if unrequested:
            raise CommandError(
                f"{extension_id} does not request {', '.join(unrequested)} "
                f"(it requests: {', '.join(sorted(row.requested_grants)) or 'nothing'})"
            )
        try:
            # the service sets the admitted set: add to what is admitted already. A revocation
            # in the admin between this read and the call's lock would be undone, as it would
            # by staff's own form opened before it.
            row = extension_admit_grants(
                extension_id=extension_id,
                grants=sorted(wanted | set(row.admitted_grants)),
                actor=options["actor"],
            )
        except HostError as exc:  # gone, or its requests changed by a sync meanwhile
            raise CommandError(exc.message) from exc
        admitted = ", ".join(row.admitted_grants) or "none"
        message = f"{row.id} admitted grants: {admitted}"
        if row.pending_grants:
            message += f"; still waiting: {', '.join(row.pending_grants)}"
        self.stdout.write(message)
