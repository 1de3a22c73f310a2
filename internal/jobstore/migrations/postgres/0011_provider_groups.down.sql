DROP TABLE sluice_provider_group_jobs;
DROP TABLE sluice_provider_groups;
