-- Fails when two clients hold the same idempotency key: delete or rename
-- one of them first.
ALTER TABLE sluice_batches DROP COLUMN client;
DROP INDEX sluice_jobs_idempotency;
CREATE UNIQUE INDEX sluice_jobs_idempotency ON sluice_jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
