-- Ownership: every job and batch belongs to the client that created it.
-- Idempotency keys are scoped per client, so the column-level UNIQUE on
-- idempotency_key goes: SQLite cannot drop it in place, so the table is
-- rebuilt (the documented 12-step way: new table, copy, drop, rename), then
-- its indexes and the webhook outbox triggers are made again.
CREATE TABLE sluice_jobs_new (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key      TEXT,
    upstream             TEXT    NOT NULL,
    priority             INTEGER NOT NULL,
    client               TEXT    NOT NULL DEFAULT '',
    path                 TEXT    NOT NULL,
    body                 BLOB    NOT NULL,
    deadline             INTEGER,
    max_attempts         INTEGER NOT NULL,
    attempts             INTEGER NOT NULL DEFAULT 0,
    stalls               INTEGER NOT NULL DEFAULT 0,
    state                TEXT    NOT NULL,
    available_at         INTEGER NOT NULL,
    lease_token          INTEGER NOT NULL DEFAULT 0,
    lease_owner          TEXT    NOT NULL DEFAULT '',
    lease_expires_at     INTEGER,
    errors               TEXT    NOT NULL DEFAULT '[]',
    result_status        INTEGER,
    result_header        BLOB,
    result_body          BLOB,
    usage_input          INTEGER NOT NULL DEFAULT 0,
    usage_output         INTEGER NOT NULL DEFAULT 0,
    usage_cache_creation INTEGER NOT NULL DEFAULT 0,
    usage_cache_read     INTEGER NOT NULL DEFAULT 0,
    batch_id             TEXT,
    custom_id            TEXT,
    webhook_url          TEXT    NOT NULL DEFAULT '',
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    finished_at          INTEGER
);

INSERT INTO sluice_jobs_new SELECT * FROM sluice_jobs;
-- Keep the id sequence, so ids of deleted jobs are never reused.
DELETE FROM sqlite_sequence WHERE name = 'sluice_jobs_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'sluice_jobs_new', seq FROM sqlite_sequence WHERE name = 'sluice_jobs';
DROP TABLE sluice_jobs;
ALTER TABLE sluice_jobs_new RENAME TO sluice_jobs;

-- Claims: one upstream, and any upstream. Partial, so finished jobs cost
-- nothing and claim cost stays flat with the backlog.
CREATE INDEX sluice_jobs_claim_upstream ON sluice_jobs (upstream, priority, available_at, id) WHERE state = 'queued';
CREATE INDEX sluice_jobs_claim_any ON sluice_jobs (priority, available_at, id) WHERE state = 'queued';
-- NextAvailable: the earliest queued job of an upstream.
CREATE INDEX sluice_jobs_available ON sluice_jobs (upstream, available_at) WHERE state = 'queued';
-- The rescuer: expired leases, and queued jobs past their deadline.
CREATE INDEX sluice_jobs_lease ON sluice_jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX sluice_jobs_deadline ON sluice_jobs (deadline) WHERE state = 'queued' AND deadline IS NOT NULL;
-- The cleaner and listings by state.
CREATE INDEX sluice_jobs_state_finished ON sluice_jobs (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE UNIQUE INDEX sluice_jobs_batch ON sluice_jobs (batch_id, custom_id) WHERE batch_id IS NOT NULL;
-- Idempotency keys, per client (NULLs are distinct: jobs without a key).
CREATE UNIQUE INDEX sluice_jobs_idempotency ON sluice_jobs (client, idempotency_key);

CREATE TRIGGER sluice_webhook_outbox AFTER UPDATE OF state ON sluice_jobs
    WHEN NEW.webhook_url <> '' AND NEW.state IN ('succeeded', 'dead', 'canceled')
        AND OLD.state NOT IN ('succeeded', 'dead', 'canceled')
BEGIN
    INSERT INTO sluice_webhook_deliveries (id, job_id, event, created_at, retry_from, next_attempt_at, updated_at)
    VALUES ('msg_' || lower(hex(randomblob(16))), NEW.id, NEW.state,
        coalesce(NEW.finished_at, NEW.updated_at), coalesce(NEW.finished_at, NEW.updated_at),
        coalesce(NEW.finished_at, NEW.updated_at), NEW.updated_at);
END;

-- A deleted job (the cleaner) takes its deliveries with it (a trigger rather
-- than a foreign key, as on PostgreSQL, where the key cost every job update).
CREATE TRIGGER sluice_webhook_outbox_cleanup AFTER DELETE ON sluice_jobs
    WHEN OLD.webhook_url <> ''
BEGIN
    DELETE FROM sluice_webhook_deliveries WHERE job_id = OLD.id;
END;

ALTER TABLE sluice_batches ADD COLUMN client TEXT NOT NULL DEFAULT '';
