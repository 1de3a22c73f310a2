-- The lease index only serves the rescuer (state = 'running' AND
-- lease_expires_at <= now). Its predicate was state = 'running' alone, which
-- every fenced lookup by id (complete, heartbeat, fail: WHERE id = … AND
-- state = 'running') also implies; on a table that was empty when a
-- connection first planned them, the cached generic plans walked this whole
-- index (every running job, and the dead entries of every job that ran
-- since the last vacuum) instead of probing the primary key, so each
-- completion cost grew with the jobs in flight. Every running row has a
-- lease expiry, so the index holds the same rows; a lookup by id no longer
-- implies its predicate, while the rescuer's lease_expires_at <= $2 does.
DROP INDEX sluice_jobs_lease;
CREATE INDEX sluice_jobs_lease ON sluice_jobs (lease_expires_at) WHERE state = 'running' AND lease_expires_at IS NOT NULL;
