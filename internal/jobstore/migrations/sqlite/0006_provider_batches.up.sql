-- The providers' batch APIs (Anthropic Message Batches, OpenAI Batch and
-- Files) are a view over Sluice batches. A batch records the upstream it
-- was created on, the provider's own fields it must answer with (attrs:
-- opaque JSON the API writes once), when a cancel was first asked for, and
-- until when its jobs are kept whatever the cleaner's per-state retention
-- (the provider's results retention). Times are unix microseconds (UTC).
ALTER TABLE sluice_batches ADD COLUMN upstream TEXT NOT NULL DEFAULT '';
ALTER TABLE sluice_batches ADD COLUMN attrs BLOB;
ALTER TABLE sluice_batches ADD COLUMN cancel_requested_at INTEGER;
ALTER TABLE sluice_batches ADD COLUMN keep_until INTEGER;
-- Listing a client's batches on an upstream, newest first.
CREATE INDEX sluice_batches_list ON sluice_batches (client, upstream, created_at, id);

-- Files uploaded for a batch (OpenAI's /v1/files, purpose "batch"): kept
-- until deleted.
CREATE TABLE sluice_files (
    id         TEXT PRIMARY KEY,
    client     TEXT    NOT NULL,
    upstream   TEXT    NOT NULL,
    purpose    TEXT    NOT NULL,
    filename   TEXT    NOT NULL,
    bytes      INTEGER NOT NULL,
    content    BLOB    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX sluice_files_list ON sluice_files (client, upstream, created_at, id);
