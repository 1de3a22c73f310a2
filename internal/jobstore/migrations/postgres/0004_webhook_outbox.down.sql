DROP TRIGGER sluice_webhook_outbox_cleanup ON sluice_jobs;
DROP FUNCTION sluice_webhook_outbox_cleanup();
DROP TRIGGER sluice_webhook_outbox ON sluice_jobs;
DROP FUNCTION sluice_webhook_outbox();
DROP TABLE sluice_webhook_deliveries;
