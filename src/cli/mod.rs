//! The bodies of the `monfs` subcommands (src/main.rs keeps the clap
//! definitions and the dispatch): `monfs mount` and how it daemonizes,
//! `monfs run`, `monfs umockdev-run`, `monfs ctl`, and the tools beside the daemon that run in
//! their own processes against a mount (`monfs record`, `monfs
//! umockdev-record`, `monfs zvm-dump`)
//! or on their own (`monfs generate`: man pages, shell completions).

pub mod ctl;
mod daemonize;
pub mod error;
pub mod generate;
pub mod mount;
pub mod record;
pub mod run;
pub mod signals;
pub mod umockdev_record;
pub mod umockdev_run;
pub mod zvm_dump;
