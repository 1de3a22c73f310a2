DROP TRIGGER sluice_webhook_outbox_cleanup;
DROP TRIGGER sluice_webhook_outbox;
DROP TABLE sluice_webhook_deliveries;
