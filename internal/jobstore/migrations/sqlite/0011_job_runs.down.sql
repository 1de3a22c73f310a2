DROP INDEX sluice_jobs_run;
ALTER TABLE sluice_jobs DROP COLUMN run_id;
