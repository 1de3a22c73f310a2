-- Spend budgets (docs/budgets.md): what each client spent, per upstream,
-- model (the price table's entry) and UTC day, in nano-dollars. The
-- gateway adds to it in batches (AddSpend) and sums it at start to restore
-- its budgets' day, month and total windows.
CREATE TABLE sluice_spend (
    client     TEXT   NOT NULL,
    day        TEXT   NOT NULL, -- YYYY-MM-DD, UTC
    upstream   TEXT   NOT NULL,
    model      TEXT   NOT NULL,
    nanos      INTEGER NOT NULL DEFAULT 0,
    requests   INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (client, day, upstream, model)
);
