"""The JSON parser for every API view: malformed or pathologically nested JSON is a 400."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class HostJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            # json's recursion limit (deeply nested arrays/objects) is client input, not a defect
            raise ParseError("JSON nesting is too deep") from exc
