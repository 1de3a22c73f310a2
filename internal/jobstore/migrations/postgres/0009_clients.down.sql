DROP TABLE sluice_clients;
DROP SEQUENCE sluice_clients_version;
