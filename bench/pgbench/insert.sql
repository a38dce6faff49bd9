-- Baseline of B-artifact-emit: one single-row INSERT per transaction.
\set aid random(1, 100000 * :scale)
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, :aid, 1, CURRENT_TIMESTAMP);
