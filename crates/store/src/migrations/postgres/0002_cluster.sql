-- Instances serving from this database, each with a heartbeat; a row whose heartbeat is older
-- than the liveness timeout belongs to a dead instance (its management records are removed).
CREATE TABLE instances (
    node BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Poll leases: the instance that polls a server this round, until when.
CREATE TABLE poll_leases (
    skey TEXT PRIMARY KEY,
    holder BIGINT NOT NULL,
    until TIMESTAMPTZ NOT NULL
);
