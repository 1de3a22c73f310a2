DROP INDEX sluice_jobs_lease;
CREATE INDEX sluice_jobs_lease ON sluice_jobs (lease_expires_at) WHERE state = 'running';
