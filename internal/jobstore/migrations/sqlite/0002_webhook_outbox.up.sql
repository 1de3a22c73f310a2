-- The webhook outbox: one row per completion webhook owed. A trigger writes
-- it in the statement (so the transaction) that finishes a job with a
-- webhook_url, whatever the path (complete, fail, cancel, batch cancel, the
-- rescuer's kills and deadline expiries): a finished job and its delivery
-- are committed together or not at all. Times are unix microseconds (UTC).
CREATE TABLE sluice_webhook_deliveries (
    id              TEXT PRIMARY KEY,
    job_id          INTEGER NOT NULL,
    event           TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    lease_token     INTEGER NOT NULL DEFAULT 0,
    last_status     INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    retry_from      INTEGER NOT NULL,
    next_attempt_at INTEGER,
    finished_at     INTEGER,
    updated_at      INTEGER NOT NULL
);

-- Due deliveries, oldest first; partial, so delivered rows cost nothing.
CREATE INDEX sluice_webhook_deliveries_due ON sluice_webhook_deliveries (next_attempt_at) WHERE state = 'pending';
-- A job's deliveries (its view, redeliver, and the cleanup trigger below).
CREATE INDEX sluice_webhook_deliveries_job ON sluice_webhook_deliveries (job_id);

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
