"""Benchmarks beside their baselines (spec 08, performance requirements).

`make bench` runs `python -m bench.runner`: it creates its own PostgreSQL database, measures
each row of the spec 08 table beside a baseline measured in the same run, prints a table of
figures and ratios and writes `bench/results/<date>.json`. These are programs that measure and
report, never timed tests: nothing here runs in CI's test run.
"""
