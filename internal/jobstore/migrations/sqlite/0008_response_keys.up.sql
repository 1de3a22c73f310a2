-- Which key of an upstream's pool created each stored OpenAI Response
-- (docs/http-api.md, "Stored responses"): only that key can read, delete,
-- cancel or continue it, on any gateway sharing the store and after a
-- restart. key is the key's fingerprint (never the key); a row is kept
-- until expires_at (the upstream's response_retention), then swept by the
-- retention cleaner. Times are unix microseconds.
CREATE TABLE sluice_response_keys (
    upstream   TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (upstream, id)
);
CREATE INDEX sluice_response_keys_expires ON sluice_response_keys (expires_at);
