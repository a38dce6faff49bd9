"""`manage.py verify_artifacts [--world ID …]`: report artifact-store corruption.

Exits 0 when every checked world is intact, 1 (after listing every problem, each naming its
world and sequence) when any is not.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from artifacts.models import World
from artifacts.services import integrity_check


class Command(BaseCommand):
    help = "Recompute artifact fingerprints and check sequences, identities and events."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--world", action="append", dest="worlds", help="Only this world (repeatable)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        worlds = options.get("worlds")
        problems = integrity_check(world_ids=worlds)
        checked = World.objects.filter(pk__in=worlds).count() if worlds else World.objects.count()
        for problem in problems:
            self.stderr.write(f"CORRUPT {problem}")
        if problems:
            self.stderr.write(f"{len(problems)} problem(s) in {checked} world(s) checked.")
            sys.exit(1)
        self.stdout.write(f"OK: {checked} world(s) checked, no corruption found.")
