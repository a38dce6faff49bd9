"""Stable serialisation and the three fingerprints: payload, record and call (spec 06)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from artifacts.models import ContentType


def stable_json(value: Any) -> str:
    """Compact JSON with sorted keys: equal values always give equal text."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def payload_text(payload: Any, content_type: str) -> str:
    """How a payload is stored and measured: text as is, JSON as its compact serialisation,
    its numbers written as the seed's `JSON.stringify` writes them (`json_numbers`)."""
    if content_type == ContentType.APPLICATION_JSON or not isinstance(payload, str):
        return stable_json(json_numbers(payload))
    return payload


SAFE_INTEGER = 2**53  # beyond it a float's integer digits are not exactly JavaScript's


def json_numbers(value: Any) -> Any:
    """JSON has one kind of number: `1.0` and `1` are the same payload, as in the seed (its
    fingerprint and its size are JavaScript's: `{"v":1}`, 7 bytes, for both). A whole float
    within the safe integers is written as the integer, so the same call sent either way is
    the same call."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= SAFE_INTEGER:
        return int(value)
    if isinstance(value, dict):
        return {key: json_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_numbers(item) for item in value]
    return value


# What JavaScript's `String.prototype.trim` removes (the seed's blank check of ids): Unicode
# white space and line terminators, U+FEFF included, where Python's `str.strip` keeps U+FEFF
# and removes the ASCII separators U+001C..U+001F and U+0085.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def blank(value: str) -> bool:
    """Empty once trimmed as the seed trims (`value.trim() === ""`)."""
    return value.strip(JS_WHITESPACE) == ""


# a stored payload that no longer decodes (corruption): what the integrity check reports and
# the debug view shows; `json.loads` raises ValueError, or RecursionError when nested too deep
MSG_PAYLOAD_UNDECODABLE = "the JSON payload does not parse"
UNDECODABLE = (ValueError, RecursionError)


def payload_decode(text: str, content_type: str) -> Any:
    if content_type == ContentType.APPLICATION_JSON:
        return json.loads(text)
    return text


def payload_fingerprint(output: str, content_type: str, text: str) -> str:
    """sha256 of output + payload, `text` being `payload_text(...)` (JSON in its stable form).

    The header is one line of JSON (no raw newline can occur in it), so header + text is
    unambiguous; the content type keeps the text "1" and the JSON number 1 apart.
    """
    header = stable_json({"content_type": content_type, "output": output})
    return sha256(header + "\n" + text)


def call_fingerprint(
    tool_name: str, context: Mapping[str, Any], request: Mapping[str, Any], parameters: Any
) -> str:
    """sha256 of the tool name, the frozen context, the request attempt and the parameters:
    the identity of a tool call for idempotency."""
    return sha256(
        stable_json(
            {
                "tool_name": tool_name,
                "context": dict(context),
                "request_id": request["request_id"],
                "request_attempt": request["request_attempt"],
                "parameters": parameters,
            }
        )
    )


def emit_call_fingerprint(
    context: Mapping[str, Any], request: Mapping[str, Any], *, output: str, payload_fingerprint: str
) -> str:
    """The call fingerprint of an `emit` (the one definition: emit and verify_artifacts)."""
    return call_fingerprint(
        "artifact_emit",
        context,
        request,
        {"output": output, "payload_fingerprint": payload_fingerprint},
    )


def clear_call_fingerprint(
    context: Mapping[str, Any], request: Mapping[str, Any], *, output: str
) -> str:
    """The call fingerprint of a `clear` (the one definition: clear and verify_artifacts)."""
    return call_fingerprint("artifact_clear", context, request, {"output": output})


def record_fingerprint(fields: Mapping[str, Any]) -> str:
    """sha256 of a record's immutable fields (`Record.fingerprint_fields`)."""
    return sha256(stable_json(dict(fields)))


def record_id_for(sequence: int, fingerprint: str) -> str:
    """The seed's public record id: `artifact:<sequence>:<16 hex of the payload fingerprint>`."""
    return f"artifact:{sequence}:{fingerprint[7:23]}"
