DROP TABLE sluice_spend_holds;
