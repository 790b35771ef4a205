//! The command-line tools beside the daemon: engines of `monfs record` and
//! `monfs zvm-dump`, which run in their own processes against a mount, and
//! of `monfs generate` (man pages, shell completions).

pub mod generate;
pub mod record;
pub mod run;
pub mod signals;
pub mod zvm_dump;
