//! The `DeploymentPolicy` custom resource (spec/operator.md §2).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Rollout policy: compartments of nodes, each with a budget and a batch strategy (§2.1).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "nodewright.nvidia.com",
    version = "v1alpha1",
    kind = "DeploymentPolicy",
    plural = "deploymentpolicies",
    singular = "deploymentpolicy",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentPolicySpec {
    /// Reset batch state when a NodeWright completes (schema default `true`).
    #[serde(
        default = "crate::nodewright::some_true",
        skip_serializing_if = "Option::is_none"
    )]
    pub reset_batch_state_on_completion: Option<bool>,
    /// Budget and strategy for nodes matching no compartment.
    pub default: PolicyDefault,
    /// Named compartments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compartments: Vec<Compartment>,
}

/// `spec.default`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDefault {
    /// Exactly one of percent or count.
    pub budget: Budget,
    /// Required by the schema.
    pub strategy: Strategy,
}

/// One compartment (§2.1).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Compartment {
    /// Non-empty, unique, not `__default__`.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Nodes of this compartment.
    pub selector: LabelSelector,
    /// Exactly one of percent or count.
    pub budget: Budget,
    /// Optional: without it the compartment is budget-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
}

/// A budget: exactly one field (§2.2).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// 1..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub percent: Option<i32>,
    /// ≥ 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub count: Option<i32>,
}

/// A strategy object: exactly one of the three kinds (§2.1).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    /// Constant batch size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<StrategyParams>,
    /// Batch grows by `delta`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear: Option<StrategyParams>,
    /// Batch grows by `growthFactor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exponential: Option<StrategyParams>,
}

/// Which strategy kind a [`Strategy`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StrategyKind {
    /// `fixed`.
    Fixed,
    /// `linear`.
    Linear,
    /// `exponential`.
    Exponential,
}

impl StrategyKind {
    /// Metric label / display name.
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyKind::Fixed => "fixed",
            StrategyKind::Linear => "linear",
            StrategyKind::Exponential => "exponential",
        }
    }
}

impl Strategy {
    /// The kinds set on this object (valid objects set exactly one).
    pub fn kinds(&self) -> Vec<StrategyKind> {
        let mut kinds = Vec::new();
        if self.fixed.is_some() {
            kinds.push(StrategyKind::Fixed);
        }
        if self.linear.is_some() {
            kinds.push(StrategyKind::Linear);
        }
        if self.exponential.is_some() {
            kinds.push(StrategyKind::Exponential);
        }
        kinds
    }

    /// The single kind and its parameters, or `None` when zero or several kinds are set.
    pub fn resolved(&self) -> Option<(StrategyKind, &StrategyParams)> {
        match (&self.fixed, &self.linear, &self.exponential) {
            (Some(p), None, None) => Some((StrategyKind::Fixed, p)),
            (None, Some(p), None) => Some((StrategyKind::Linear, p)),
            (None, None, Some(p)) => Some((StrategyKind::Exponential, p)),
            _ => None,
        }
    }
}

/// Strategy parameters (§2.1). Absent values take their defaults everywhere.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StrategyParams {
    /// Size of the first batch (≥ 1, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub initial_batch: Option<i32>,
    /// Linear step (≥ 1, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub delta: Option<i32>,
    /// Exponential factor (≥ 2, default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2))]
    pub growth_factor: Option<i32>,
    /// Minimum success percentage (1..=100, default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub batch_threshold: Option<i32>,
    /// Consecutive failing batches that stop the compartment (≥ 1; none = never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub failure_threshold: Option<i32>,
    /// Progress percentage after which failures no longer slow or stop (1..=100, default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub safety_limit: Option<i32>,
}

impl StrategyParams {
    /// `initialBatch` with its default.
    pub fn initial_batch(&self) -> i32 {
        self.initial_batch.unwrap_or(1)
    }
    /// `delta` with its default.
    pub fn delta(&self) -> i32 {
        self.delta.unwrap_or(1)
    }
    /// `growthFactor` with its default.
    pub fn growth_factor(&self) -> i32 {
        self.growth_factor.unwrap_or(2)
    }
    /// `batchThreshold` with its default.
    pub fn batch_threshold(&self) -> i32 {
        self.batch_threshold.unwrap_or(100)
    }
    /// `safetyLimit` with its default.
    pub fn safety_limit(&self) -> i32 {
        self.safety_limit.unwrap_or(50)
    }
    /// The mutating webhook's defaulting: fill every absent defaulted parameter (§2.1).
    pub fn with_defaults(&self, kind: StrategyKind) -> StrategyParams {
        StrategyParams {
            initial_batch: Some(self.initial_batch()),
            delta: match kind {
                StrategyKind::Linear => Some(self.delta()),
                _ => self.delta,
            },
            growth_factor: match kind {
                StrategyKind::Exponential => Some(self.growth_factor()),
                _ => self.growth_factor,
            },
            batch_threshold: Some(self.batch_threshold()),
            failure_threshold: self.failure_threshold,
            safety_limit: Some(self.safety_limit()),
        }
    }
}
