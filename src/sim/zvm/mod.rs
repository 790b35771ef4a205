//! The z/VM *MONITOR simulator (placeholder; being written).

use serde::Deserialize;

/// The `zvm:` section of the config.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ZvmConfig {}
