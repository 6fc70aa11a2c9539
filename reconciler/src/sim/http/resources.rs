//! The resources `sim serve` speaks, and the discovery documents built from them.
//!
//! Built-in resources are the static [`RESOURCES`]; resources of CustomResourceDefinitions
//! created through the API get their definitions interned here ([`intern`]) and which of
//! them a server serves is its [`super::crds::CrdRegistry`].

use std::sync::RwLock;

use serde_json::{Value, json};

use super::crds::CrdRegistry;

/// One served resource (a group/version/plural triple).
#[derive(Debug)]
pub struct ResourceDef {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Plural name (the URL segment).
    pub plural: &'static str,
    /// Singular name.
    pub singular: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names (`no`, `po`, …) for kubectl.
    pub short_names: &'static [&'static str],
    /// Whether a `status` subresource exists.
    pub status: bool,
}

impl ResourceDef {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// Index of a resource in [`RESOURCES`].
pub type Rid = usize;

// One positional constructor keeps the table below readable as a table.
#[allow(clippy::too_many_arguments)]
const fn builtin(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    status: bool,
) -> ResourceDef {
    ResourceDef {
        group,
        version,
        plural,
        singular,
        kind,
        namespaced,
        short_names,
        status,
    }
}

/// Every served resource. The order of the first seven matches the simulator's collections
/// (see `Rid` constants below).
pub static RESOURCES: &[ResourceDef] = &[
    builtin("", "v1", "nodes", "node", "Node", false, &["no"], true),
    builtin("", "v1", "pods", "pod", "Pod", true, &["po"], true),
    builtin("batch", "v1", "jobs", "job", "Job", true, &[], true),
    builtin(
        "",
        "v1",
        "configmaps",
        "configmap",
        "ConfigMap",
        true,
        &["cm"],
        false,
    ),
    builtin(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        true,
        &["pdb"],
        true,
    ),
    builtin(
        "nodewright.nvidia.com",
        "v1alpha1",
        "nodewrights",
        "nodewright",
        "NodeWright",
        false,
        &[],
        true,
    ),
    builtin(
        "nodewright.nvidia.com",
        "v1alpha1",
        "deploymentpolicies",
        "deploymentpolicy",
        "DeploymentPolicy",
        false,
        &[],
        false,
    ),
    builtin(
        "coordination.k8s.io",
        "v1",
        "leases",
        "lease",
        "Lease",
        true,
        &[],
        false,
    ),
    builtin("", "v1", "events", "event", "Event", true, &["ev"], false),
    builtin(
        "events.k8s.io",
        "v1",
        "events",
        "event",
        "Event",
        true,
        &["ev"],
        false,
    ),
    builtin(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        false,
        &["ns"],
        true,
    ),
    builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
    ),
    builtin(
        "apps",
        "v1",
        "daemonsets",
        "daemonset",
        "DaemonSet",
        true,
        &["ds"],
        true,
    ),
    builtin(
        "apps",
        "v1",
        "replicasets",
        "replicaset",
        "ReplicaSet",
        true,
        &["rs"],
        true,
    ),
    builtin(
        "apps",
        "v1",
        "statefulsets",
        "statefulset",
        "StatefulSet",
        true,
        &["sts"],
        true,
    ),
    builtin(
        "apps",
        "v1",
        "deployments",
        "deployment",
        "Deployment",
        true,
        &["deploy"],
        true,
    ),
];

/// Nodes.
pub const NODES: Rid = 0;
/// Pods.
pub const PODS: Rid = 1;
/// Jobs.
pub const JOBS: Rid = 2;
/// ConfigMaps.
pub const CONFIG_MAPS: Rid = 3;
/// PodDisruptionBudgets.
pub const PDBS: Rid = 4;
/// NodeWrights.
pub const NODEWRIGHTS: Rid = 5;
/// DeploymentPolicies.
pub const POLICIES: Rid = 6;
/// Leases.
pub const LEASES: Rid = 7;
/// Core v1 Events.
pub const CORE_EVENTS: Rid = 8;
/// events.k8s.io/v1 Events.
pub const EVENTS: Rid = 9;
/// Namespaces.
pub const NAMESPACES: Rid = 10;
/// CustomResourceDefinitions.
pub const CRDS: Rid = 11;
/// apps/v1 DaemonSets.
pub const DAEMON_SETS: Rid = 12;
/// apps/v1 ReplicaSets.
pub const REPLICA_SETS: Rid = 13;
/// apps/v1 StatefulSets.
pub const STATEFUL_SETS: Rid = 14;
/// apps/v1 Deployments.
pub const DEPLOYMENTS: Rid = 15;

/// Definitions of custom resources, process-wide so a [`Rid`] names one definition for
/// every server. Each distinct definition is interned once and kept: CRD definitions are
/// few, and a rid must stay valid while any server may still hold it.
static CUSTOM: RwLock<Vec<&'static ResourceDef>> = RwLock::new(Vec::new());

/// The definition of a built-in or interned custom resource.
pub fn def(rid: Rid) -> &'static ResourceDef {
    if let Some(def) = RESOURCES.get(rid) {
        return def;
    }
    let custom = CUSTOM.read().unwrap_or_else(|e| e.into_inner());
    // Rids beyond RESOURCES are minted only by `intern`, which never removes an entry.
    custom
        .get(rid - RESOURCES.len())
        .copied()
        .expect("a custom rid is minted by intern and never removed")
}

/// The fields of a custom resource's definition, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomDef {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural.
    pub plural: String,
    /// Singular.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names.
    pub short_names: Vec<String>,
    /// Whether the `status` subresource is enabled.
    pub status: bool,
}

fn same(def: &ResourceDef, custom: &CustomDef) -> bool {
    def.group == custom.group
        && def.version == custom.version
        && def.plural == custom.plural
        && def.singular == custom.singular
        && def.kind == custom.kind
        && def.namespaced == custom.namespaced
        && def.status == custom.status
        && def.short_names.iter().eq(custom.short_names.iter())
}

/// The rid of a custom resource definition, interning it on first sight.
pub fn intern(custom: &CustomDef) -> Rid {
    let mut table = CUSTOM.write().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = table.iter().position(|d| same(d, custom)) {
        return RESOURCES.len() + i;
    }
    let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
    let short_names: Vec<&'static str> = custom.short_names.iter().map(|s| leak(s)).collect();
    let def: &'static ResourceDef = Box::leak(Box::new(ResourceDef {
        group: leak(&custom.group),
        version: leak(&custom.version),
        plural: leak(&custom.plural),
        singular: leak(&custom.singular),
        kind: leak(&custom.kind),
        namespaced: custom.namespaced,
        short_names: Box::leak(short_names.into_boxed_slice()),
        status: custom.status,
    }));
    table.push(def);
    RESOURCES.len() + table.len() - 1
}

/// The resource for a group, version and plural.
pub fn find(group: &str, version: &str, plural: &str) -> Option<Rid> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Every served definition: the built-ins, then the registry's custom resources.
fn served<'a>(crds: &'a CrdRegistry) -> impl Iterator<Item = &'static ResourceDef> + 'a {
    RESOURCES.iter().chain(crds.rids().map(def))
}

/// The groups other than core, in order of first appearance.
fn groups(crds: &CrdRegistry) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for r in served(crds) {
        if !r.group.is_empty() && !out.iter().any(|(g, _)| *g == r.group) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// `GET /api`.
pub fn api_versions(address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    })
}

fn group_doc(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [gv], "preferredVersion": gv})
}

/// `GET /apis`.
pub fn api_group_list(crds: &CrdRegistry) -> Value {
    let groups: Vec<Value> = groups(crds)
        .into_iter()
        .map(|(g, v)| group_doc(g, v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`, when served.
pub fn api_group(crds: &CrdRegistry, group: &str) -> Option<Value> {
    let (g, v) = groups(crds).into_iter().find(|(g, _)| *g == group)?;
    let mut doc = group_doc(g, v);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `GET /api/v1` or `GET /apis/<group>/<version>`, when served.
pub fn resource_list(crds: &CrdRegistry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in served(crds).filter(|r| r.group == group && r.version == version) {
        let verbs = [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        resources.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs,
            "shortNames": r.short_names,
        }));
        if r.status {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if crds.has_scale(r) {
            resources.push(json!({
                "name": format!("{}/scale", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if r.plural == "pods" {
            resources.push(json!({
                "name": "pods/log",
                "singularName": "",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["get"],
            }));
            resources.push(json!({
                "name": "pods/eviction",
                "singularName": "",
                "namespaced": true,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}
