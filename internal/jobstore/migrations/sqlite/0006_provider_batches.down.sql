DROP TABLE sluice_files;
DROP INDEX sluice_batches_list;
ALTER TABLE sluice_batches DROP COLUMN keep_until;
ALTER TABLE sluice_batches DROP COLUMN cancel_requested_at;
ALTER TABLE sluice_batches DROP COLUMN attrs;
ALTER TABLE sluice_batches DROP COLUMN upstream;
