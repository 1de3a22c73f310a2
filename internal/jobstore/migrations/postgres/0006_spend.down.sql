DROP TABLE sluice_spend;
