# Named tokens get an optional expiry, and DRF's plaintext one-per-user tokens
# (rest_framework.authtoken, no longer installed) become named tokens kept as a SHA-256 of the
# key: each key keeps working, and the plaintext table is dropped (issue 27 item 7).

import hashlib

from django.db import migrations, models
from django.utils.dateparse import parse_datetime

DRF_TABLE = "authtoken_token"
MIGRATED_NAME = "API token (from before named tokens)"


def _drf_rows(connection):
    """(key, user id, created) of every DRF token; none when the table was never made."""
    if DRF_TABLE not in connection.introspection.table_names():
        return None
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {q('key')}, {q('user_id')}, {q('created')} FROM {q(DRF_TABLE)}")  # noqa: S608  fixed names
        return cursor.fetchall()


def _as_datetime(value):
    return parse_datetime(value) if isinstance(value, str) else value


def hash_drf_tokens(apps, schema_editor):
    """Copy DRF's tokens into ApiToken (digest, hint, creation time), then drop its table and
    content types, so no plaintext key is left in the database."""
    connection = schema_editor.connection
    rows = _drf_rows(connection)
    if rows is None:
        return
    ApiToken = apps.get_model("accounts", "ApiToken")
    for key, user_id, created in rows:
        token, _ = ApiToken.objects.get_or_create(
            digest=hashlib.sha256(key.encode()).hexdigest(),
            defaults={"user_id": user_id, "name": MIGRATED_NAME, "hint": key[:10]})
        if created is not None:  # auto_now_add set "now": keep when the key was really made
            ApiToken.objects.filter(pk=token.pk).update(created_at=_as_datetime(created))
    schema_editor.execute(f"DROP TABLE {connection.ops.quote_name(DRF_TABLE)}")
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="authtoken").delete()


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0004_apitoken'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        migrations.AddField(
            model_name='apitoken',
            name='expires_at',
            field=models.DateTimeField(blank=True, help_text='refused from then on; empty: never expires', null=True),
        ),
        # not reversible: the plaintext keys are gone, which is the point
        migrations.RunPython(hash_drf_tokens, migrations.RunPython.noop, elidable=False),
    ]
