-- Runs: jobs submitted one by one as one whole (`sluice batch run`), named
-- by the submitter's run id, so they can be listed and canceled together.
-- Partial, so jobs outside a run cost the index nothing; a run's jobs add
-- an entry on each rewrite (claim, completion), as other indexed columns
-- do.
ALTER TABLE sluice_jobs ADD COLUMN run_id text COLLATE "C";
CREATE INDEX sluice_jobs_run ON sluice_jobs (run_id, id) WHERE run_id IS NOT NULL;
