-- Jobs, batches and paused upstreams. Times are unix microseconds (UTC).
CREATE TABLE sluice_jobs (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key      TEXT UNIQUE,
    upstream             TEXT    NOT NULL,
    priority             INTEGER NOT NULL,
    client               TEXT    NOT NULL DEFAULT '',
    path                 TEXT    NOT NULL,
    body                 BLOB    NOT NULL,
    deadline             INTEGER,
    max_attempts         INTEGER NOT NULL,
    attempts             INTEGER NOT NULL DEFAULT 0,
    stalls               INTEGER NOT NULL DEFAULT 0,
    state                TEXT    NOT NULL,
    available_at         INTEGER NOT NULL,
    lease_token          INTEGER NOT NULL DEFAULT 0,
    lease_owner          TEXT    NOT NULL DEFAULT '',
    lease_expires_at     INTEGER,
    errors               TEXT    NOT NULL DEFAULT '[]',
    result_status        INTEGER,
    result_header        BLOB,
    result_body          BLOB,
    usage_input          INTEGER NOT NULL DEFAULT 0,
    usage_output         INTEGER NOT NULL DEFAULT 0,
    usage_cache_creation INTEGER NOT NULL DEFAULT 0,
    usage_cache_read     INTEGER NOT NULL DEFAULT 0,
    batch_id             TEXT,
    custom_id            TEXT,
    webhook_url          TEXT    NOT NULL DEFAULT '',
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    finished_at          INTEGER
);

-- Claims: one upstream, and any upstream. Partial, so finished jobs cost
-- nothing and claim cost stays flat with the backlog.
CREATE INDEX sluice_jobs_claim_upstream ON sluice_jobs (upstream, priority, available_at, id) WHERE state = 'queued';
CREATE INDEX sluice_jobs_claim_any ON sluice_jobs (priority, available_at, id) WHERE state = 'queued';
-- NextAvailable: the earliest queued job of an upstream.
CREATE INDEX sluice_jobs_available ON sluice_jobs (upstream, available_at) WHERE state = 'queued';
-- The rescuer: expired leases, and queued jobs past their deadline.
CREATE INDEX sluice_jobs_lease ON sluice_jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX sluice_jobs_deadline ON sluice_jobs (deadline) WHERE state = 'queued' AND deadline IS NOT NULL;
-- The cleaner and listings by state.
CREATE INDEX sluice_jobs_state_finished ON sluice_jobs (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE UNIQUE INDEX sluice_jobs_batch ON sluice_jobs (batch_id, custom_id) WHERE batch_id IS NOT NULL;

CREATE TABLE sluice_batches (
    id         TEXT PRIMARY KEY,
    format     TEXT    NOT NULL,
    total      INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE sluice_paused_upstreams (
    upstream  TEXT PRIMARY KEY,
    paused_at INTEGER NOT NULL
);
