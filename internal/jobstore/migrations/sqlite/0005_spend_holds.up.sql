-- Spend holds (docs/budgets.md, "What survives a crash"): the worst case
-- of each budgeted request in flight, written before the request is sent
-- and deleted when it settles (in the statement that adds its cost to
-- sluice_spend). A hold left open by a process that died is charged at
-- its worst case once its lease has ended. One row per request in flight:
-- no index beyond the key (the reaper reads them all, and they are few).
CREATE TABLE sluice_spend_holds (
    owner       TEXT        NOT NULL,
    seq         INTEGER     NOT NULL,
    client      TEXT        NOT NULL,
    upstream    TEXT        NOT NULL,
    model       TEXT        NOT NULL,
    nanos       INTEGER     NOT NULL,
    lease_until INTEGER     NOT NULL, -- unix microseconds
    created_at  INTEGER     NOT NULL, -- unix microseconds
    PRIMARY KEY (owner, seq)
);
