//! The z/VM monitor reader (placeholder; being written).

use std::sync::Arc;

use crate::vfs::Tree;

/// The monreader facility.
pub struct MonReaderDev;

impl MonReaderDev {
    /// Build the facility and add `dev/monreader` to `tree`.
    pub fn install(_tree: &Arc<Tree>, _cfg: &crate::config::Config, _clock: Arc<dyn crate::clock::Clock>) -> Arc<MonReaderDev> {
        Arc::new(MonReaderDev)
    }
    /// Start the z/VM simulator.
    pub fn start(&self) {}
    /// Stop it.
    pub fn stop(&self) {}
}
