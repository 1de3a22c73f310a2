-- The webhook outbox: one row per completion webhook owed. A trigger writes
-- it in the statement (so the transaction) that finishes a job with a
-- webhook_url, whatever the path (complete, fail, cancel, batch cancel, the
-- rescuer's kills and deadline expiries): a finished job and its delivery
-- are committed together or not at all. The delivery loop leases due rows
-- by moving next_attempt_at past the lease (FOR UPDATE SKIP LOCKED) and
-- writes each attempt's result fenced by lease_token.
CREATE TABLE sluice_webhook_deliveries (
    id              text PRIMARY KEY,
    job_id          bigint      NOT NULL,
    event           text        NOT NULL,
    state           text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    lease_token     bigint      NOT NULL DEFAULT 0,
    last_status     integer     NOT NULL DEFAULT 0,
    last_error      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    retry_from      timestamptz NOT NULL,
    next_attempt_at timestamptz,
    finished_at     timestamptz,
    updated_at      timestamptz NOT NULL
);

-- Due deliveries, oldest first; partial, so delivered rows cost nothing.
CREATE INDEX sluice_webhook_deliveries_due ON sluice_webhook_deliveries (next_attempt_at) WHERE state = 'pending';
-- A job's deliveries (its view, redeliver, and the cleanup trigger below).
CREATE INDEX sluice_webhook_deliveries_job ON sluice_webhook_deliveries (job_id);

CREATE FUNCTION sluice_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sluice_webhook_deliveries (id, job_id, event, created_at, retry_from, next_attempt_at, updated_at)
    VALUES ('msg_' || replace(gen_random_uuid()::text, '-', ''), NEW.id, NEW.state,
        coalesce(NEW.finished_at, NEW.updated_at), coalesce(NEW.finished_at, NEW.updated_at),
        coalesce(NEW.finished_at, NEW.updated_at), NEW.updated_at);
    RETURN NULL;
END
$$;

CREATE TRIGGER sluice_webhook_outbox AFTER UPDATE OF state ON sluice_jobs FOR EACH ROW
    WHEN (NEW.webhook_url <> '' AND NEW.state IN ('succeeded', 'dead', 'canceled')
        AND OLD.state NOT IN ('succeeded', 'dead', 'canceled'))
    EXECUTE FUNCTION sluice_webhook_outbox();

-- A deleted job (the cleaner) takes its deliveries with it. A trigger, not a
-- foreign key: the key's referential trigger fired on every update of a job
-- (claim, heartbeat, complete) and cost a fifth of a drain's throughput.
CREATE FUNCTION sluice_webhook_outbox_cleanup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM sluice_webhook_deliveries WHERE job_id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER sluice_webhook_outbox_cleanup AFTER DELETE ON sluice_jobs FOR EACH ROW
    WHEN (OLD.webhook_url <> '')
    EXECUTE FUNCTION sluice_webhook_outbox_cleanup();
