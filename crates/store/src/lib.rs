//! Where the master keeps its registry between runs: [`SqliteStore`] for one instance (with an
//! integrity check and `--repair`), [`PgStore`] for several instances sharing one registry, and
//! the [`cluster`] that carries other instances' changes in and shares poll leases.
//!
//! Both implement [`muster_core::store::Store`]; the core decides, a store only keeps.
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::indexing_slicing, clippy::unwrap_used))]

mod blob;
pub mod cluster;
pub mod location;
pub mod postgres;
pub mod sqlite;

pub use location::{DataDirLock, LOCK_FILE, StoreUrl, lock_data_dir};
pub use muster_core::store::{BackendError, Loaded, NullStore, Store, StoreError, rows};
pub use postgres::{PgShared, PgStore};
pub use sqlite::{DB_FILE, RepairReport, SCHEMA_VERSION, SqliteStore, repair};
