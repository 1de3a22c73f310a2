DROP TABLE sluice_paused_upstreams;
DROP TABLE sluice_batches;
DROP TABLE sluice_jobs;
