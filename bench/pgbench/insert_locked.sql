-- Context for B-artifact-emit: the same INSERT under a row lock held through its commit, as an
-- emit holds its world's lock (spec 06: a world's sequence is gap-free, assigned under the
-- world's row lock). Both clients lock one row, so their transactions run one at a time: the
-- ceiling of any emit that commits alone, with no work of its own.
\set aid random(1, 100000 * :scale)
BEGIN;
SELECT 1 FROM pgbench_branches WHERE bid = 1 FOR UPDATE;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, :aid, 1, CURRENT_TIMESTAMP);
END;
