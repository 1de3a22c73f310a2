-- Completion webhooks of batches (docs/jobs-api.md, "Batch webhooks"). A
-- batch created with a webhook URL has a row here, whose open_jobs counts
-- its jobs not finished. The triggers keep it as the jobs move, in the
-- statement (so the transaction) that moves them, whatever the path
-- (complete, fail, cancel, batch cancel, the router's write-back, the
-- rescuer's kills and deadline expiries, a retry that requeues one): the
-- finish that takes it to 0 writes the batch's delivery to the outbox
-- (batch.completed, batch.expired or batch.cancelled), a batch created
-- without jobs (an OpenAI batch that failed its validation) writes
-- batch.failed when it is created, one whose every job is dead from the
-- start (each refused as the provider refuses it) batch.completed. A batch that ends again after a retry
-- owes a new delivery. Times are unix microseconds (UTC).
CREATE TABLE sluice_batch_webhooks (
    batch_id         TEXT PRIMARY KEY,
    webhook_url      TEXT    NOT NULL,
    open_jobs        INTEGER NOT NULL,
    last_finished_at INTEGER
);

-- A delivery is a job's (job_id, batch_id '') or a batch's (job_id 0).
ALTER TABLE sluice_webhook_deliveries ADD COLUMN batch_id TEXT NOT NULL DEFAULT '';
CREATE INDEX sluice_webhook_deliveries_batch ON sluice_webhook_deliveries (batch_id) WHERE batch_id <> '';

CREATE TRIGGER sluice_batch_webhook_finish AFTER UPDATE OF state ON sluice_jobs
    WHEN NEW.batch_id IS NOT NULL AND NEW.state IN ('succeeded', 'dead', 'canceled')
        AND OLD.state NOT IN ('succeeded', 'dead', 'canceled')
BEGIN
    UPDATE sluice_batch_webhooks SET open_jobs = open_jobs - 1,
        last_finished_at = coalesce(NEW.finished_at, NEW.updated_at)
    WHERE batch_id = NEW.batch_id;
END;

CREATE TRIGGER sluice_batch_webhook_reopen AFTER UPDATE OF state ON sluice_jobs
    WHEN NEW.batch_id IS NOT NULL AND OLD.state IN ('succeeded', 'dead', 'canceled')
        AND NEW.state NOT IN ('succeeded', 'dead', 'canceled')
BEGIN
    UPDATE sluice_batch_webhooks SET open_jobs = open_jobs + 1 WHERE batch_id = NEW.batch_id;
END;

-- The event: cancelled when a cancel was asked for, expired when a job
-- died of its deadline unsent (the providers' "expired"), else completed.
CREATE TRIGGER sluice_batch_webhook_outbox AFTER UPDATE OF open_jobs ON sluice_batch_webhooks
    WHEN NEW.open_jobs = 0 AND OLD.open_jobs > 0
BEGIN
    INSERT INTO sluice_webhook_deliveries (id, job_id, batch_id, event, created_at, retry_from, next_attempt_at, updated_at)
    SELECT 'msg_' || lower(hex(randomblob(16))), 0, NEW.batch_id,
        CASE WHEN b.cancel_requested_at IS NOT NULL THEN 'batch.cancelled'
            WHEN EXISTS (SELECT 1 FROM sluice_jobs e WHERE e.batch_id = NEW.batch_id AND e.state = 'dead'
                AND e.deadline IS NOT NULL AND e.finished_at >= e.deadline AND e.result_status IS NULL) THEN 'batch.expired'
            ELSE 'batch.completed' END,
        NEW.last_finished_at, NEW.last_finished_at, NEW.last_finished_at, NEW.last_finished_at
    FROM sluice_batches b WHERE b.id = NEW.batch_id;
END;

CREATE TRIGGER sluice_batch_webhook_failed AFTER INSERT ON sluice_batch_webhooks
    WHEN NEW.open_jobs = 0
BEGIN
    INSERT INTO sluice_webhook_deliveries (id, job_id, batch_id, event, created_at, retry_from, next_attempt_at, updated_at)
    SELECT 'msg_' || lower(hex(randomblob(16))), 0, NEW.batch_id,
        CASE WHEN b.total = 0 THEN 'batch.failed' ELSE 'batch.completed' END,
        b.created_at, b.created_at, b.created_at, b.created_at
    FROM sluice_batches b WHERE b.id = NEW.batch_id;
END;

-- A deleted batch (DELETE, the cleaner) takes its webhook and deliveries.
CREATE TRIGGER sluice_batch_webhook_cleanup AFTER DELETE ON sluice_batches
BEGIN
    DELETE FROM sluice_webhook_deliveries WHERE batch_id = OLD.id;
    DELETE FROM sluice_batch_webhooks WHERE batch_id = OLD.id;
END;
