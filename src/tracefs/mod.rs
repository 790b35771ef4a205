//! tracefs event tracing (placeholder; being written).

use std::sync::Arc;

use crate::vfs::Tree;

/// The tracing facility.
pub struct Tracing;

impl Tracing {
    /// Build the facility and add its files under `tracing/` in `tree`.
    pub fn install(_tree: &Arc<Tree>, _clock: Arc<dyn crate::clock::Clock>) -> Arc<Tracing> {
        Arc::new(Tracing)
    }
}

/// The `tracing:` section of the config.
#[derive(Clone, Debug, Default, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {}
