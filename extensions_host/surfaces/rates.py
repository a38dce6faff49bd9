"""Rate strings like `600/min` (no Django imports: settings parse them at startup)."""

from __future__ import annotations

import re
from functools import lru_cache

_RATE = re.compile(r"\A(\d+)/(s|sec|second|m|min|minute|h|hour|d|day)\Z")
_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@lru_cache(maxsize=8)
def parse_rate(value: str) -> tuple[int, int] | None:
    """`"600/min"` → (600, 60); `"off"` → None. Raises ValueError for anything else."""
    text = value.strip().lower()
    if text in {"off", "none", ""}:
        return None
    match = _RATE.match(text)
    if match is None or int(match.group(1)) < 1:
        raise ValueError(f"rate {value!r} must look like 600/min (or off)")
    return int(match.group(1)), _PERIODS[match.group(2)[0]]
