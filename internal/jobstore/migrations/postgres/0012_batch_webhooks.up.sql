-- Completion webhooks of batches (docs/jobs-api.md, "Batch webhooks"). A
-- batch created with a webhook URL has a row here, whose open_jobs counts
-- its jobs not finished. The triggers keep it as the jobs move, in the
-- statement (so the transaction) that moves them, whatever the path
-- (complete, fail, cancel, batch cancel, the router's write-back, the
-- rescuer's kills and deadline expiries, a retry that requeues one): the
-- finish that takes it to 0 writes the batch's delivery to the outbox
-- (batch.completed, batch.expired or batch.cancelled), a batch created
-- without jobs (an OpenAI batch that failed its validation) writes
-- batch.failed when it is created. A batch that ends again after a retry
-- owes a new delivery.
--
-- The count is a row of its own, not a column of sluice_batches: the
-- UPDATE of it serializes the transactions finishing the batch's last jobs
-- (each sees the other's finish once it holds the row, so exactly one
-- takes it to 0), and a batch cancel, which updates sluice_batches before
-- its jobs, never waits on a worker that holds a job and waits on it.
CREATE TABLE sluice_batch_webhooks (
    batch_id         text COLLATE "C" PRIMARY KEY,
    webhook_url      text        NOT NULL,
    open_jobs        integer     NOT NULL,
    last_finished_at timestamptz
);

-- A delivery is a job's (job_id, batch_id '') or a batch's (job_id 0).
ALTER TABLE sluice_webhook_deliveries ADD COLUMN batch_id text COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX sluice_webhook_deliveries_batch ON sluice_webhook_deliveries (batch_id) WHERE batch_id <> '';

CREATE FUNCTION sluice_batch_webhook_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('succeeded', 'dead', 'canceled') THEN
        UPDATE sluice_batch_webhooks SET open_jobs = open_jobs - 1,
            last_finished_at = coalesce(NEW.finished_at, NEW.updated_at)
        WHERE batch_id = NEW.batch_id;
    ELSE
        UPDATE sluice_batch_webhooks SET open_jobs = open_jobs + 1 WHERE batch_id = NEW.batch_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER sluice_batch_webhook_count AFTER UPDATE OF state ON sluice_jobs FOR EACH ROW
    WHEN (NEW.batch_id IS NOT NULL AND (NEW.state IN ('succeeded', 'dead', 'canceled'))
        IS DISTINCT FROM (OLD.state IN ('succeeded', 'dead', 'canceled')))
    EXECUTE FUNCTION sluice_batch_webhook_count();

-- The event: failed for a batch without jobs (completed for one whose
-- every job was dead from the start: refused as the provider refuses a
-- request, its errored results ready), cancelled when a cancel was
-- asked for, expired when a job died of its deadline unsent (the
-- providers' "expired"), else completed.
CREATE FUNCTION sluice_batch_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sluice_webhook_deliveries (id, job_id, batch_id, event, created_at, retry_from, next_attempt_at, updated_at)
    SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), 0, NEW.batch_id, ev.event, ev.at, ev.at, ev.at, ev.at
    FROM sluice_batches b, LATERAL (SELECT
        CASE WHEN TG_OP = 'INSERT' AND b.total = 0 THEN 'batch.failed'
            WHEN TG_OP = 'INSERT' THEN 'batch.completed'
            WHEN b.cancel_requested_at IS NOT NULL THEN 'batch.cancelled'
            WHEN EXISTS (SELECT 1 FROM sluice_batch_jobs m JOIN sluice_jobs e ON e.id = m.job_id
                WHERE m.batch_id = NEW.batch_id AND e.state = 'dead' AND e.deadline IS NOT NULL
                    AND e.finished_at >= e.deadline AND e.result_status IS NULL) THEN 'batch.expired'
            ELSE 'batch.completed' END AS event,
        CASE WHEN TG_OP = 'INSERT' THEN b.created_at ELSE coalesce(NEW.last_finished_at, b.created_at) END AS at) ev
    WHERE b.id = NEW.batch_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER sluice_batch_webhook_outbox AFTER UPDATE OF open_jobs ON sluice_batch_webhooks FOR EACH ROW
    WHEN (NEW.open_jobs = 0 AND OLD.open_jobs > 0)
    EXECUTE FUNCTION sluice_batch_webhook_outbox();

CREATE TRIGGER sluice_batch_webhook_failed AFTER INSERT ON sluice_batch_webhooks FOR EACH ROW
    WHEN (NEW.open_jobs = 0)
    EXECUTE FUNCTION sluice_batch_webhook_outbox();

-- A deleted batch (DELETE, the cleaner) takes its webhook and deliveries.
CREATE FUNCTION sluice_batch_webhook_cleanup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM sluice_webhook_deliveries WHERE batch_id = OLD.id;
    DELETE FROM sluice_batch_webhooks WHERE batch_id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER sluice_batch_webhook_cleanup AFTER DELETE ON sluice_batches FOR EACH ROW
    EXECUTE FUNCTION sluice_batch_webhook_cleanup();
