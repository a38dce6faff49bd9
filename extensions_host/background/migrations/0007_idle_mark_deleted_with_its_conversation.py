"""An idle mark becomes a one-to-one key to its conversation, deleted with it (it was a plain
column, pruned by an hourly scan). The marks of conversations already gone are deleted first;
the others, and the column's name and values, are kept."""

from django.db import migrations, models
from django.db.models import Exists, OuterRef


def delete_orphans(apps, schema_editor):
    IdleMark = apps.get_model("ext_background", "IdleMark")
    Conversation = apps.get_model("conversations", "Conversation")
    IdleMark.objects.filter(
        ~Exists(Conversation.objects.filter(pk=OuterRef("conversation_id")))
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0003_conversation_id_validator"),
        ("ext_background", "0006_job_columns_db_default"),
    ]

    operations = [
        migrations.RunPython(delete_orphans, migrations.RunPython.noop),
        # the field is renamed in the state only: its column stays `conversation_id`
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="idlemark",
                    name="conversation_id",
                    field=models.CharField(
                        db_column="conversation_id", max_length=64, primary_key=True, serialize=False
                    ),
                ),
                migrations.RenameField(
                    model_name="idlemark", old_name="conversation_id", new_name="conversation"
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterField(
            model_name="idlemark",
            name="conversation",
            field=models.OneToOneField(
                on_delete=models.deletion.CASCADE,
                primary_key=True,
                related_name="+",
                serialize=False,
                to="conversations.conversation",
            ),
        ),
    ]
