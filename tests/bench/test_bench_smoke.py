"""The bench's report logic: figures, ratios, goals, the table and the JSON report. No timing
is measured or asserted here (benchmarks are programs, not tests)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from bench import runner
from bench.report import (
    Line,
    format_number,
    format_ratio,
    percentile,
    ratio,
    render_table,
    report_data,
    results_path,
    summary,
    unavailable,
    write_report,
)

WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def test_the_runner_imports_without_django_set_up():
    assert callable(runner.main)
    assert runner.SETTLE_RATE == 200.0


def test_percentiles_use_the_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_a_summary_gives_count_percentiles_and_max():
    assert summary([3.0, 1.0, 2.0]) == {"count": 3, "p50": 2.0, "p90": 3.0, "p99": 3.0, "max": 3.0}
    assert summary([])["p99"] is None


def test_a_ratio_needs_a_positive_baseline():
    assert ratio(50, 200) == 0.25
    assert ratio(None, 200) is None
    assert ratio(50, None) is None
    assert ratio(50, 0) is None


def test_figures_and_ratios_are_formatted_for_the_table():
    assert format_number(1234.4, "/s") == "1,234 /s"
    assert format_number(42.25, "req/s") == "42.2 req/s"
    assert format_number(12.345, "ms") == "12.3 ms"
    assert format_number(1.234, "x") == "1.23×"
    assert format_number(None, "ms") == "—"
    assert format_ratio(0.523) == "52.3%"
    assert format_ratio(None) == "—"


def test_a_ratio_goal_is_met_only_at_or_above_the_fraction_of_the_baseline():
    line = Line("B-timer-throughput", "fired/s", value=1000, unit="/s", baseline="pgbench",
                baseline_value=2000, kind="ratio", goal=0.5)  # fmt: skip
    assert line.ratio == 0.5
    assert line.met is True
    assert line.goal_text() == "≥ 50%"
    line.value = 999
    assert line.met is False


def test_below_and_at_most_goals_compare_the_figure_itself():
    below = Line("B-projection", "p99", value=30.0, unit="ms", kind="below", goal=30.0)
    assert below.met is False
    assert below.goal_text() == "< 30.0 ms"
    at_most = Line("B-scale", "ratio", value=1.5, unit="x", kind="at_most", goal=1.5)
    assert at_most.met is True
    assert at_most.goal_text() == "≤ 1.50×"


def test_an_unavailable_row_has_no_verdict_and_says_what_is_missing():
    line = unavailable("B-artifact-emit", "emits/s", "the artifact store (artifact_emit)")
    assert line.met is None
    assert line.unavailable == "not available: the artifact store (artifact_emit)"
    assert line.as_dict()["ratio"] is None


def test_the_table_shows_every_line_with_its_baseline_ratio_and_verdict():
    lines = [
        Line("B-api-record", "req/s", value=600, unit="req/s", baseline="bare view",
             baseline_value=1000, baseline_unit="req/s", kind="ratio", goal=0.6),
        Line("B-projection", "p99", value=45.0, unit="ms", kind="below", goal=30.0),
        unavailable("B-settled", "runs/s", "settled delivery"),
    ]  # fmt: skip
    table = render_table(lines).splitlines()
    assert table[0].split() == ["row", "figure", "value", "baseline", "ratio", "goal", "met"]
    assert len(table) == 2 + len(lines)
    assert "bare view 1,000 req/s" in table[2] and "60.0%" in table[2] and table[2].endswith("yes")
    assert "45.0 ms" in table[3] and table[3].endswith("NO")
    assert "not available: settled delivery" in table[4]


def test_the_report_counts_goals_and_lists_unavailable_rows(tmp_path):
    lines = [
        Line("B-a", "x", value=1, kind="at_most", goal=2),
        Line("B-b", "y", value=3, kind="at_most", goal=2),
        unavailable("B-c", "z", "something"),
    ]
    data = report_data(lines=lines, baselines={"pgbench_update": {"tps": 1.0}},
                       machine={"nproc": 2}, config={"seconds": 3}, started=WHEN,
                       finished=WHEN + dt.timedelta(seconds=90), notes=["busy"])  # fmt: skip
    assert (data["goals_met"], data["goals_missed"]) == (1, 1)
    assert data["unavailable"] == ["B-c: not available: something"]
    assert data["duration_s"] == 90.0
    path = write_report(data, results_path(WHEN, tmp_path))
    assert path.name == "2026-01-02.json"
    assert json.loads(path.read_text())["rows"][1]["met"] is False
    assert results_path(WHEN, tmp_path).name == "2026-01-02-030405.json"


def test_quick_mode_shortens_each_row_and_the_stored_volume():
    quick = runner.Config.from_env({"BENCH_QUICK": "1"})
    assert (quick.seconds, quick.scale_max, quick.quick) == (3.0, 100_000, True)
    full = runner.Config.from_env({})
    assert (full.seconds, full.scale_max) == (15.0, 1_000_000)
    assert runner.Config.from_env({"BENCH_SECONDS": "7"}).seconds == 7.0
    with pytest.raises(SystemExit):
        runner.Config.from_env({"BENCH_SECONDS": "0"})


def test_every_baseline_names_a_pgbench_script_that_exists():
    from bench import pg

    for name, script in runner.PGBENCH_SCRIPTS.items():
        assert (pg.SCRIPTS / script).is_file(), name
    assert (pg.SCRIPTS / runner.EMIT_STATEMENTS_SCRIPT).is_file()
