//! NodeWright API types and everything true of them: the custom resources, the node-state
//! annotation format, every metadata key, deterministic names and the admission rules.
//!
//! Wire-compatible with upstream NodeWright (`nodewright.nvidia.com/v1alpha1`); legacy
//! `skyhook.nvidia.com` manifests are converted on read (see [`legacy`]).

pub mod approvals;
pub mod crd;
pub mod duration;
pub mod glob;
pub mod keys;
pub mod legacy;
pub mod maintenance;
pub mod names;
pub mod node_state;
pub mod nodewright;
pub mod policy;
pub mod quantity;
pub mod selector;
pub mod semver;
pub mod toleration;
pub mod validate;

pub use node_state::{NodeState, PackageStatus, Stage, State, Status};
pub use nodewright::{
    BatchState, CompartmentStatus, DrainConfig, Interrupt, InterruptType, InterruptionBudget,
    NodeWright, NodeWrightSpec, NodeWrightStatus, Package, Sequencing, Uninstall,
};
pub use policy::{
    Budget, Compartment, DeploymentPolicy, DeploymentPolicySpec, Strategy, StrategyKind,
    StrategyParams,
};
