-- The registry, one row per record: the columns of the SQLite schema (version 3), plus what
-- several instances sharing one database need: a change sequence, the writing instance, and
-- soft deletes (a deleted row stays as a tombstone until it is purged, so every instance sees
-- the deletion in its catch-up).
CREATE TABLE servers (
    game TEXT NOT NULL,
    addr_kind TEXT NOT NULL,
    addr_host TEXT NOT NULL,
    addr_port INTEGER NOT NULL,
    instance BIGINT NOT NULL,
    face TEXT NOT NULL,
    game_port INTEGER,
    query_addr TEXT,
    query_protocol TEXT,
    state TEXT NOT NULL,
    first_seen BIGINT NOT NULL,
    last_heartbeat BIGINT NOT NULL,
    first_verified BIGINT,
    last_poll_ok BIGINT,
    poll_failures BIGINT NOT NULL,
    source TEXT NOT NULL,
    info TEXT,
    face_data TEXT,
    last_proof BIGINT,
    ddnet TEXT,
    seq BIGINT NOT NULL,
    origin BIGINT NOT NULL,
    deleted BOOLEAN NOT NULL DEFAULT false,
    changed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (game, addr_kind, addr_host, addr_port, instance)
);
CREATE SEQUENCE servers_seq;
CREATE INDEX servers_by_seq ON servers (seq);

-- Small values: the highest purged tombstone's sequence number ('purged_through').
CREATE TABLE meta (k TEXT PRIMARY KEY, v BIGINT NOT NULL);
INSERT INTO meta VALUES ('purged_through', 0);
