//! The NodeWright GitOps reconciler: Git source, lifecycle engine, simulated cluster, cluster
//! adapters, status write-back and the `nodewright` command line.

#![forbid(unsafe_code)]

pub mod cli;
pub mod cluster;
pub mod controller;
pub mod diff;
pub mod engine;
pub mod forge;
pub mod job;
pub mod metrics;
pub mod plan;
pub mod scenario;
pub mod settings;
pub mod shared;
pub mod sim;
pub mod snapshot;
pub mod source;
pub mod text;
pub mod verbs;
pub mod writeback;
