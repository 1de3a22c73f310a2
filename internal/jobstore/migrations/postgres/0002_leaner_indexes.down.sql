CREATE UNIQUE INDEX sluice_jobs_batch ON sluice_jobs (batch_id, custom_id) WHERE batch_id IS NOT NULL;
DROP TABLE sluice_batch_jobs;
CREATE INDEX sluice_jobs_available ON sluice_jobs (upstream, available_at) WHERE state = 'queued';
DROP INDEX sluice_jobs_idempotency;
ALTER TABLE sluice_jobs ADD CONSTRAINT sluice_jobs_idempotency_key_key UNIQUE (idempotency_key);
ALTER TABLE sluice_jobs
    ALTER COLUMN idempotency_key TYPE text COLLATE "default",
    ALTER COLUMN upstream TYPE text COLLATE "default",
    ALTER COLUMN state TYPE text COLLATE "default",
    ALTER COLUMN batch_id TYPE text COLLATE "default",
    ALTER COLUMN custom_id TYPE text COLLATE "default";
