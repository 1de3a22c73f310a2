DROP TABLE sluice_clients;
