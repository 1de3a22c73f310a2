-- Fewer index writes per job: every claim and completion rewrites the job's
-- row, and each rewrite adds an entry to every index whose predicate the new
-- row meets. Measured on a 2-core machine, index inserts were a third of
-- PostgreSQL's time during a drain.

-- Keys compare bytewise: the database's default collation (often a libc
-- locale) made every comparison in these indexes a strcoll call.
ALTER TABLE sluice_jobs
    ALTER COLUMN idempotency_key TYPE text COLLATE "C",
    ALTER COLUMN upstream TYPE text COLLATE "C",
    ALTER COLUMN state TYPE text COLLATE "C",
    ALTER COLUMN batch_id TYPE text COLLATE "C",
    ALTER COLUMN custom_id TYPE text COLLATE "C";

-- Idempotency keys: only jobs that have one are indexed (the full unique
-- constraint indexed a NULL for every other job, on every rewrite).
ALTER TABLE sluice_jobs DROP CONSTRAINT sluice_jobs_idempotency_key_key;
CREATE UNIQUE INDEX sluice_jobs_idempotency ON sluice_jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- NextAvailable reads the claim indexes, one probe per priority.
DROP INDEX sluice_jobs_available;

-- Batch membership lives in its own table, written once when the batch is
-- created, instead of a (batch_id, custom_id) index on the jobs table that
-- gained an entry on every rewrite of every batch job.
CREATE TABLE sluice_batch_jobs (
    batch_id  text COLLATE "C" NOT NULL,
    custom_id text COLLATE "C" NOT NULL,
    job_id    bigint NOT NULL,
    PRIMARY KEY (batch_id, custom_id)
);
INSERT INTO sluice_batch_jobs (batch_id, custom_id, job_id)
    SELECT batch_id, custom_id, id FROM sluice_jobs WHERE batch_id IS NOT NULL;
DROP INDEX sluice_jobs_batch;
