DROP TABLE sluice_response_keys;
