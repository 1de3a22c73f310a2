-- Jobs routed to a provider's Batch API (docs/jobs-api.md, "Routing to the
-- provider's Batch API"). A group is one provider batch: written with its
-- jobs (leased to it) before the provider is called, so a crash never
-- leaves a batch Sluice does not know of; its provider id once the
-- provider accepted it. One router holds it at a time (lease_owner,
-- lease_token: fencing, as for a job). Times are unix microseconds (UTC).
CREATE TABLE sluice_provider_groups (
    id                TEXT PRIMARY KEY,
    upstream          TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    provider_id       TEXT    NOT NULL DEFAULT '',
    lease_owner       TEXT    NOT NULL DEFAULT '',
    lease_token       INTEGER NOT NULL DEFAULT 1,
    lease_expires_at  INTEGER NOT NULL,
    jobs              INTEGER NOT NULL,
    bytes             INTEGER NOT NULL,
    pull_back_at      INTEGER,
    submit_started_at INTEGER,
    created_at        INTEGER NOT NULL,
    submitted_at      INTEGER,
    ended_at          INTEGER,
    updated_at        INTEGER NOT NULL
);
-- The open groups of an upstream (LeaseGroups); partial, so ended groups
-- cost nothing.
CREATE INDEX sluice_provider_groups_open ON sluice_provider_groups (upstream, lease_expires_at) WHERE state <> 'ended';

-- A group's jobs: the lease token the group holds each with, and whether
-- its line was written back (done: its result and its spend, once).
CREATE TABLE sluice_provider_group_jobs (
    group_id  TEXT    NOT NULL,
    job_id    INTEGER NOT NULL,
    job_token INTEGER NOT NULL,
    done      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (group_id, job_id)
);
