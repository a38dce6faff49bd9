"""Figures, ratios, goals and the printed/JSON report (pure functions: no Django, no I/O but
`write_report`)."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by nearest rank; None for no values."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError("q must be within 0..100")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """count, p50, p90, p99, max of a list of latencies."""
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


def ratio(value: float | None, baseline: float | None) -> float | None:
    """value / baseline; None when either is missing or the baseline is not positive."""
    if value is None or baseline is None or baseline <= 0:
        return None
    return value / baseline


def format_number(value: float | None, unit: str = "") -> str:
    """A figure for the table: thousands separated, ms with one decimal, '—' when missing."""
    if value is None:
        return "—"
    if unit == "ms":
        return f"{value:,.1f} ms"
    if unit == "x":
        return f"{value:.2f}×"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"
    return f"{text} {unit}".rstrip()


def format_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


@dataclass
class Line:
    """One line of the table: a figure of one spec-08 row, its baseline, ratio and goal.

    `kind` says how `goal` reads: `ratio` (figure/baseline ≥ goal), `below` (figure < goal),
    `at_most` (figure ≤ goal), `info` (no goal: context only).
    """

    row: str
    metric: str
    value: float | None = None
    unit: str = ""
    baseline: str = ""
    baseline_value: float | None = None
    baseline_unit: str = ""
    kind: str = "info"
    goal: float | None = None
    note: str = ""
    unavailable: str = ""  # "not available: <what is missing>"
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        return ratio(self.value, self.baseline_value)

    @property
    def met(self) -> bool | None:
        """Whether the goal is reached (None: no goal or nothing measured)."""
        if self.unavailable or self.goal is None:
            return None
        if self.kind == "ratio":
            r = self.ratio
            return None if r is None else r >= self.goal
        if self.value is None:
            return None
        if self.kind == "below":
            return self.value < self.goal
        if self.kind == "at_most":
            return self.value <= self.goal
        return None

    def goal_text(self) -> str:
        if self.goal is None:
            return ""
        if self.kind == "ratio":
            return f"≥ {self.goal * 100:.0f}%"
        sign = "<" if self.kind == "below" else "≤"
        return f"{sign} {format_number(self.goal, self.unit)}"

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        data["met"] = self.met
        data["goal_text"] = self.goal_text()
        return data


def unavailable(row: str, metric: str, missing: str) -> Line:
    return Line(row=row, metric=metric, unavailable=f"not available: {missing}")


COLUMNS = ("row", "figure", "value", "baseline", "ratio", "goal", "met")


def table_rows(lines: Iterable[Line]) -> list[tuple[str, ...]]:
    rows = []
    for line in lines:
        if line.unavailable:
            rows.append((line.row, line.metric, line.unavailable, "", "", "", ""))
            continue
        baseline = ""
        if line.baseline:
            baseline = f"{line.baseline} {format_number(line.baseline_value, line.baseline_unit)}"
        met = {True: "yes", False: "NO", None: ""}[line.met]
        shown_ratio = format_ratio(line.ratio) if line.baseline_value is not None else ""
        rows.append(
            (
                line.row,
                line.metric,
                format_number(line.value, line.unit),
                baseline,
                shown_ratio,
                line.goal_text(),
                met,
            )
        )
    return rows


def render_table(lines: Iterable[Line]) -> str:
    """A plain-text table (fixed-width columns) of every line."""
    rows = [COLUMNS, *table_rows(lines)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    out = []
    for index, row in enumerate(rows):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def report_data(
    *,
    lines: Sequence[Line],
    baselines: dict[str, Any],
    machine: dict[str, Any],
    config: dict[str, Any],
    started: dt.datetime,
    finished: dt.datetime,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    return {
        "started": started.isoformat(),
        "finished": finished.isoformat(),
        "duration_s": round((finished - started).total_seconds(), 1),
        "machine": machine,
        "config": config,
        "baselines": baselines,
        "rows": [line.as_dict() for line in lines],
        "goals_met": sum(1 for line in lines if line.met is True),
        "goals_missed": sum(1 for line in lines if line.met is False),
        "unavailable": [line.row + ": " + line.unavailable for line in lines if line.unavailable],
        "notes": list(notes),
    }


def results_path(when: dt.datetime, directory: Path = RESULTS_DIR) -> Path:
    """`bench/results/<date>.json` (a second run the same day gets its time appended)."""
    path = directory / f"{when:%Y-%m-%d}.json"
    if path.exists():
        path = directory / f"{when:%Y-%m-%d}-{when:%H%M%S}.json"
    return path


def write_report(data: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path
