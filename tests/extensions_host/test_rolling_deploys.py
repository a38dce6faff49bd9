"""Rolling deploys: after `migrate`, processes still running the previous code insert rows
without the columns it added. A NOT NULL column added to a table that exists already needs a
database default (`db_default`), not only a Python `default` the old code does not know.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.apps import apps
from django.db import connection, models
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import AddField

from extensions_host.background.models import JobState, JobTrigger
from extensions_host.models import RosterEntry

ROOT = Path(__file__).resolve().parents[2]

# AddFields of NOT NULL columns without a database default from before the rule: each got one
# since, by a later AlterField (set only the default: no table rewrite on PostgreSQL).
BEFORE_THE_RULE = {
    ("extensions_host", "0004_roster_declared_auto_resume"): (
        "rosterentry",
        "declared_auto_resume",
    ),
    ("ext_background", "0003_job_trigger_missed_runs"): ("jobtrigger", "missed_runs"),
    ("ext_background", "0005_job_state_schedule"): ("jobstate", "schedule"),
    ("artifacts", "0003_world_state_version"): ("world", "state_version"),
}


def insert_without(instance: models.Model, column: str) -> None:
    """INSERT the row as code that does not know `column` would: every other column, in raw
    SQL (an auto-increment id left to the database)."""
    model = type(instance)
    fields = [
        field
        for field in model._meta.concrete_fields
        if field.column != column
        and not (isinstance(field, models.AutoField) and getattr(instance, field.attname) is None)
    ]
    values = [
        field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields
    ]
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(model._meta.db_table)} "  # names from the model
            f"({', '.join(quote(field.column) for field in fields)}) "
            f"VALUES ({', '.join(['%s'] * len(fields))})",
            values,
        )


def test_old_code_inserts_a_roster_row_without_the_declared_auto_resume_column(db):
    insert_without(RosterEntry(id="old", version="1.0.0", revision="r1"), "declared_auto_resume")
    row = RosterEntry.objects.get(pk="old")
    assert (row.declared_auto_resume, row.auto_resume_effective) == (True, True)


def test_old_code_inserts_jobs_without_the_schedule_and_missed_runs_columns(db):
    insert_without(JobState(id="ext:old:daily", extension_id="old", name="daily"), "schedule")
    assert JobState.objects.get(pk="ext:old:daily").schedule == ""
    insert_without(JobTrigger(job_id="ext:old:daily", actor="staff", not_before=0), "missed_runs")
    assert JobTrigger.objects.get(job_id="ext:old:daily").missed_runs == 0


def project_migrations() -> dict[tuple[str, str], object]:
    ours = {
        config.label
        for config in apps.get_app_configs()
        if Path(config.path).is_relative_to(ROOT) and ".venv" not in Path(config.path).parts
    }
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return {key: migration for key, migration in loader.disk_migrations.items() if key[0] in ours}


def needs_db_default(field: models.Field) -> bool:
    return (
        field.concrete
        and not field.null
        and not field.many_to_many
        and field.db_default is models.NOT_PROVIDED
    )


def test_no_migration_adds_a_not_null_column_without_a_database_default():
    """The rule from now on: `AddField` of a NOT NULL column to an existing table sets
    `db_default` (or adds it nullable, backfills, and makes it NOT NULL in a later release)."""
    offending = []
    for key, migration in project_migrations().items():
        if migration.initial or key in BEFORE_THE_RULE:  # type: ignore[attr-defined]
            continue  # a new table: no old code writes it
        offending += [
            f"{key[0]}.{key[1]}: {operation.model_name}.{operation.name}"
            for operation in migration.operations  # type: ignore[attr-defined]
            if isinstance(operation, AddField) and needs_db_default(operation.field)
        ]
    assert offending == []
    assert set(BEFORE_THE_RULE) <= set(project_migrations())


@pytest.mark.parametrize(
    ("app", "model", "field"),
    [(app, model, field) for (app, _), (model, field) in BEFORE_THE_RULE.items()],
)
def test_each_column_added_before_the_rule_has_a_database_default_now(app, model, field):
    assert not needs_db_default(apps.get_model(app, model)._meta.get_field(field))
