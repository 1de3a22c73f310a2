-- Runtime clients (docs/http-api.md, /v1/clients): clients created through
-- the admin API, shared by every gateway on the store. spec is the
-- gateway's JSON settings, keys a JSON array of key digests (never a key).
-- A revoked client is a tombstone (deleted_at set, no keys). version is
-- new on every write (from the sequence, so concurrent writers never share
-- one); every gateway polls the sum of the versions, which grows with
-- every committed write whatever order they commit in, and reloads the
-- table when it changes.
CREATE SEQUENCE sluice_clients_version;
CREATE TABLE sluice_clients (
    name       TEXT        NOT NULL PRIMARY KEY,
    spec       TEXT        NOT NULL,
    keys       TEXT        NOT NULL,
    version    BIGINT      NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    deleted_at TIMESTAMPTZ
);
