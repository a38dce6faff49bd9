-- Baseline of B-timer-throughput and B-settled: one single-row UPDATE per transaction.
\set aid random(1, 100000 * :scale)
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;
