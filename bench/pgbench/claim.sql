-- Context for B-timer-throughput: claim the oldest due row with SKIP LOCKED and delete it, one
-- per transaction (what a sweep does for one timer, without the hook's record write).
DELETE FROM bench_queue
WHERE id = (
    SELECT id FROM bench_queue
    WHERE due <= 9000000000000
    ORDER BY due, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING id;
