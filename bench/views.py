"""The bare baseline of B-api-record: a plain Django JSON view doing the same ORM upsert as a
command's `record put` (the same table, index and statements), without DRF, authentication,
the roster check, the frame or validation by a model. Mounted only by `bench.settings`."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from extensions_host.models import ExtensionRecord

BASELINE_EXTENSION = "bench_api"
BASELINE_COLLECTION = "baseline"
MAX_KEY = 256
MAX_VALUE = 4096


@csrf_exempt
@require_POST
def baseline_put(request: HttpRequest) -> JsonResponse:
    """`POST /bench/baseline/put {key, value}` → upsert one record, answer `{key}`."""
    try:
        data = json.loads(request.body)
    except ValueError:
        return JsonResponse({"error": "body is not JSON"}, status=400)
    key = data.get("key") if isinstance(data, dict) else None
    value = data.get("value") if isinstance(data, dict) else None
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY:
        return JsonResponse({"error": "key must be 1..256 characters"}, status=400)
    if not isinstance(value, str) or len(value) > MAX_VALUE:
        return JsonResponse({"error": "value must be a string"}, status=400)
    encoded = json.dumps({"key": key, "value": value}, separators=(",", ":"))
    size = len(encoded.encode())
    with transaction.atomic():
        # The lock-read of the host's `record_put`, written as it should read: only this row
        # (`of=("self",)`), no ORDER BY (see bench/README.md: the model's default ordering
        # joins the roster, and `FOR UPDATE` then locks the extension's roster row too).
        found = list(
            ExtensionRecord.objects.select_for_update(of=("self",))
            .filter(extension_id=BASELINE_EXTENSION, collection=BASELINE_COLLECTION, key=key)
            .order_by()
            .values_list("pk", flat=True)[:1]
        )
        existing = found[0] if found else None
        if existing is None:
            ExtensionRecord.objects.create(
                extension_id=BASELINE_EXTENSION,
                collection=BASELINE_COLLECTION,
                key=key,
                value=encoded,
                size_bytes=size,
            )
        else:
            ExtensionRecord.objects.filter(pk=existing).update(value=encoded, size_bytes=size)
    return JsonResponse({"key": key})
