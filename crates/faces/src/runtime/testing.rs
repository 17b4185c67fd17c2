//! What the runners' tests share: a daemon handle over a store that keeps nothing.

use muster_core::MasterHandle;
use muster_core::registry::{RegistryConfig, Timestamp};
use muster_core::store::NullStore;

/// A daemon handle with the default registry and no store.
pub(crate) fn handle() -> MasterHandle {
    MasterHandle::open(
        RegistryConfig::default(),
        Box::new(NullStore),
        Timestamp::from_secs(1_700_000_000),
    )
    .unwrap()
    .0
}
