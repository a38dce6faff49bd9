"""Drop the index on `timer.extension` alone: `timer_key_unique` leads with the column and serves
every lookup by extension. With both, the planner with stale statistics (a burst of inserts for
one extension before autovacuum analysed the table) chose the single-column index for a
lookup by extension and key, and filtered every row of the extension: writes grew slower with
each one. The foreign key itself stays as it is (no re-validation of the table)."""

import django.db.models.deletion
from django.db import migrations, models

from core.db import drop_column_indexes


def drop_extension_index(apps, schema_editor):
    table = apps.get_model("ext_background", "Timer")._meta.db_table
    drop_column_indexes(schema_editor, table, "extension_id")


class Migration(migrations.Migration):
    dependencies = [
        ("ext_background", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="timer",
                    name="extension",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="timers",
                        to="extensions_host.rosterentry",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(drop_extension_index, migrations.RunPython.noop),
            ],
        ),
    ]
