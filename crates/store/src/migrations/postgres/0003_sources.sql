-- Where each record came from: a JSON array of {"upstream": name?, "last_seen": seconds},
-- NULL for a record whose only source is a direct registration (as in the SQLite store).
ALTER TABLE servers ADD COLUMN IF NOT EXISTS sources TEXT;
