-- Jobs routed to a provider's Batch API (docs/jobs-api.md, "Routing to the
-- provider's Batch API"). A group is one provider batch: written with its
-- jobs (leased to it) before the provider is called, so a crash never
-- leaves a batch Sluice does not know of; its provider id once the
-- provider accepted it. One router holds it at a time (lease_owner,
-- lease_token: fencing, as for a job; FOR UPDATE SKIP LOCKED between
-- nodes).
CREATE TABLE sluice_provider_groups (
    id                text PRIMARY KEY,
    upstream          text        NOT NULL,
    state             text        NOT NULL,
    provider_id       text        NOT NULL DEFAULT '',
    lease_owner       text        NOT NULL DEFAULT '',
    lease_token       bigint      NOT NULL DEFAULT 1,
    lease_expires_at  timestamptz NOT NULL,
    jobs              integer     NOT NULL,
    bytes             bigint      NOT NULL,
    pull_back_at      timestamptz,
    submit_started_at timestamptz,
    created_at        timestamptz NOT NULL,
    submitted_at      timestamptz,
    ended_at          timestamptz,
    updated_at        timestamptz NOT NULL
);
-- The open groups of an upstream (LeaseGroups); partial, so ended groups
-- cost nothing.
CREATE INDEX sluice_provider_groups_open ON sluice_provider_groups (upstream, lease_expires_at) WHERE state <> 'ended';

-- A group's jobs: the lease token the group holds each with, and whether
-- its line was written back (done: its result and its spend, once).
CREATE TABLE sluice_provider_group_jobs (
    group_id  text    NOT NULL,
    job_id    bigint  NOT NULL,
    job_token bigint  NOT NULL,
    done      boolean NOT NULL DEFAULT false,
    PRIMARY KEY (group_id, job_id)
);
