-- Runtime clients (docs/http-api.md, /v1/clients): clients created through
-- the admin API, shared by every gateway on the store. spec is the
-- gateway's JSON settings, keys a JSON array of key digests (never a key).
-- A revoked client is a tombstone (deleted_at set, no keys). version is
-- new on every write; every gateway polls the sum of the versions and
-- reloads the table when it changes.
CREATE TABLE sluice_clients (
    name       TEXT    NOT NULL PRIMARY KEY,
    spec       TEXT    NOT NULL,
    keys       TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    deleted_at INTEGER
);
