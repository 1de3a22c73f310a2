-- Spend holds (docs/budgets.md, "What survives a crash"): the worst case
-- of each budgeted request in flight, written before the request is sent
-- and deleted when it settles (in the statement that adds its cost to
-- sluice_spend). A hold left open by a process that died is charged at
-- its worst case once its lease has ended. One row per request in flight.
CREATE TABLE sluice_spend_holds (
    owner       TEXT        NOT NULL,
    seq         BIGINT      NOT NULL,
    client      TEXT        NOT NULL,
    upstream    TEXT        NOT NULL,
    model       TEXT        NOT NULL,
    nanos       BIGINT      NOT NULL,
    lease_until TIMESTAMPTZ NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (owner, seq)
);
-- The reaper's scan: a lease index, as this store prices sequential scans
-- out (and a query priced so high is JIT-compiled: a second a reap).
CREATE INDEX sluice_spend_holds_lease ON sluice_spend_holds (lease_until);
