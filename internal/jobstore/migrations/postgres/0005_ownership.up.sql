-- Ownership: every job and batch belongs to the client that created it.
-- Idempotency keys are scoped per client (two clients may use the same key
-- for different jobs), and a batch records its client so that another
-- client's id answers as unknown.
DROP INDEX sluice_jobs_idempotency;
CREATE UNIQUE INDEX sluice_jobs_idempotency ON sluice_jobs (client, idempotency_key) WHERE idempotency_key IS NOT NULL;
ALTER TABLE sluice_batches ADD COLUMN client text NOT NULL DEFAULT '';
