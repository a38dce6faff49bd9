-- Context for B-artifact-emit: an emit's own statements with no Python (no validation, no
-- fingerprints, no Django): BEGIN, the world lock with the decision read (artifacts/services/
-- sql.py: lock_and_read_for_call), the record with its event and the version bump in one
-- statement (rows_write), COMMIT, and the live-view NOTIFY after it. Needs the bench world
-- (bench/artifacts.py) and its ids as variables: -D world=… -D operation=… -D request=….
-- tests/bench/test_emit_statements.py runs it against the migrated schema.
\set n random(1, 2000000000)
BEGIN;
SELECT 1 FROM "artifacts_world" WHERE "conversation_id" = ':world' FOR UPDATE;
SELECT coalesce(x.previous_record, 0) AS previous_record, coalesce(x.previous_call, '') AS previous_call,
  x.attempt_bytes, x.output_emits, greatest(x.last_record_sequence, x.last_event_sequence) AS last
FROM (SELECT o."id", o."status", o."request_attempts",
  (SELECT r."id" FROM "artifacts_record" r
    WHERE r."operation_id" = o."id" AND r."tool_call_id" = 'pgbench-:client_id-:n') AS previous_record,
  (SELECT e."call_fingerprint" FROM "artifacts_event" e
    WHERE e."operation_id" = o."id" AND e."tool_call_id" = 'pgbench-:client_id-:n'
      AND e."tool_call_id" <> '') AS previous_call,
  COALESCE((SELECT r."attempt_bytes" FROM "artifacts_record" r WHERE r."operation_id" = o."id"
    AND r."request_id" = ':request' AND r."request_attempt" = 1
    ORDER BY r."sequence" DESC LIMIT 1), 0) AS attempt_bytes,
  COALESCE((SELECT r."output_emits" FROM "artifacts_record" r WHERE r."operation_id" = o."id"
    AND r."request_id" = ':request' AND r."request_attempt" = 1 AND r."output" = 'panel'
    ORDER BY r."sequence" DESC LIMIT 1), 0) AS output_emits,
  COALESCE((SELECT r."sequence" FROM "artifacts_record" r WHERE r."world_id" = ':world'
    ORDER BY r."sequence" DESC LIMIT 1), 0) AS last_record_sequence,
  COALESCE((SELECT e."sequence" FROM "artifacts_event" e WHERE e."world_id" = ':world'
    ORDER BY e."sequence" DESC LIMIT 1), 0) AS last_event_sequence
FROM "artifacts_operation" o WHERE o."id" = ':operation') AS x \gset
WITH r AS (INSERT INTO "artifacts_record" ("world_id", "sequence", "record_id", "operation_id", "parent_head", "preset_id", "preset_revision", "preset_scripts_enabled", "request_id", "request_attempt", "output", "channel", "key", "content_type", "renderer", "renderer_revision", "save_mode", "strategy", "invalidation", "tool_call_id", "call_fingerprint", "payload_fingerprint", "record_fingerprint", "payload", "payload_bytes", "attempt_bytes", "output_emits", "activated", "superseded", "bound_head", "created_at") VALUES (':world', :last + 1, 'artifact:' || (:last + 1) || ':4aef5de0c8c18974', ':operation', 'h0', 'bench', 'r1', false, ':request', 1, 'panel', 'main', '', 'text/markdown', '', '', 'operation', 'append', 'never', 'pgbench-:client_id-:n', 'sha256:89d8d60b9ce5a2b3b7216c207fa4f53cea7e5f898d73ee42c67e52032c6485f3', 'sha256:4aef5de0c8c18974cb1844673b6df7880322ee43155c298a7065f962f1b7f07f', 'sha256:c58374dcd3ef9b1ce147d7f3c64341f05fd19067c4536c1edcde401917b151cd', 'pgbench artifact payload', 24, :attempt_bytes + 24, :output_emits + 1, true, false, '', now()) RETURNING "id"),
  e AS (INSERT INTO "artifacts_event" ("world_id", "sequence", "kind", "operation_id", "record_id", "reason", "head", "output", "channel", "key", "tool_call_id", "call_fingerprint", "request_id", "request_attempt", "created_at") VALUES (':world', :last + 2, 'activate', ':operation', 'artifact:' || (:last + 1) || ':4aef5de0c8c18974', '', '', '', '', '', '', '', '', NULL, now())),
  c AS (UPDATE "conversations_conversation" SET "version" = "version" + 1 WHERE "id" = ':world' RETURNING 1)
SELECT (SELECT "id" FROM r), (SELECT count(*) FROM c);
END;
SELECT pg_notify('hyphae_conversations', ':world');
