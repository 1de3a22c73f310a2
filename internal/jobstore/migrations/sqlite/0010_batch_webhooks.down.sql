DROP TRIGGER sluice_batch_webhook_cleanup;
DROP TRIGGER sluice_batch_webhook_failed;
DROP TRIGGER sluice_batch_webhook_outbox;
DROP TRIGGER sluice_batch_webhook_reopen;
DROP TRIGGER sluice_batch_webhook_finish;
DELETE FROM sluice_webhook_deliveries WHERE batch_id <> '';
DROP INDEX sluice_webhook_deliveries_batch;
ALTER TABLE sluice_webhook_deliveries DROP COLUMN batch_id;
DROP TABLE sluice_batch_webhooks;
