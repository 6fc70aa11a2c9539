//! "What will this change do?" (ARCHITECTURE §2.2 diff/): classify every change between two
//! desired states the way the lifecycle will apply it, and render it for a terminal, a pull
//! request (Markdown) or a machine (JSON).

pub mod classify;
pub mod pace;
pub mod projection;
pub mod render;

pub use classify::{
    ChangeClass, DesiredDiff, NodeWrightChange, PackageChange, PolicyChange, Problem,
    RolloutSimulator, SimulatedTimeline, diff_desired,
};
pub use render::{Format, render};
