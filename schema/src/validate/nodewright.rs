//! The NodeWright webhook: §3.1 (create and update), §3.2 (update only) and the metadata
//! checks the apiserver applies to every cluster-scoped object.

use std::collections::{BTreeMap, BTreeSet};

use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;
use serde_json::Value;

use super::rules::{self, Rule};
use super::{FieldPath, PolicyCatalog, Violation, structural};
use crate::duration::GoDuration;
use crate::glob;
use crate::nodewright::{NodeWright, Package};
use crate::quantity::Quantity;
use crate::selector::{Selector, is_dns1123_subdomain};
use crate::semver::GoVersion;

/// Longest NodeWright name whose per-node keys all stay within Kubernetes' 63-character key
/// name limit: `configApplied_<nw>` (this project's extension, §16.3) is the longest key
/// (§4.1: `nodeState_` allows 53, `drainBlocked_` 50, `configApplied_` 49).
pub const MAX_NODEWRIGHT_NAME_LEN: usize = 49;

fn pkg_path(key: &str) -> FieldPath {
    FieldPath::of(&["spec", "packages", key])
}

/// Checks `metadata.name`: present, an RFC 1123 subdomain, and short enough for the per-node
/// annotation keys (§4.1).
pub fn nodewright_metadata(nw: &NodeWright) -> Vec<Violation> {
    let mut out = Vec::new();
    metadata_name(nw.metadata.name.as_deref(), &mut out);
    if let Some(name) = nw.metadata.name.as_deref()
        && name.len() > MAX_NODEWRIGHT_NAME_LEN
    {
        out.push(Violation::error(
            rules::NAME_TOO_LONG,
            FieldPath::of(&["metadata", "name"]),
            format!(
                "NodeWright name {name:?} is {} characters; at most {MAX_NODEWRIGHT_NAME_LEN} are allowed because per-node keys such as nodewright.nvidia.com/configApplied_<name> must stay within Kubernetes' 63-character key limit",
                name.len()
            ),
        ));
    }
    out
}

/// `metadata.name` required and an RFC 1123 subdomain (what the apiserver enforces for
/// cluster-scoped custom resources).
pub(crate) fn metadata_name(name: Option<&str>, out: &mut Vec<Violation>) {
    let path = FieldPath::of(&["metadata", "name"]);
    match name {
        None | Some("") => out.push(Violation::error(
            rules::NAME_REQUIRED,
            path,
            "Required value: name or generateName is required",
        )),
        Some(name) => {
            let errs = is_dns1123_subdomain(name);
            if !errs.is_empty() {
                out.push(Violation::error(
                    rules::NAME_INVALID,
                    path,
                    format!("Invalid value: {name:?}: {}", errs.join("; ")),
                ));
            }
        }
    }
}

/// §3.1 for a new object: rules 1–22 in order, then rule 23 when a catalog is given.
pub fn nodewright_create(nw: &NodeWright, policies: Option<&dyn PolicyCatalog>) -> Vec<Violation> {
    let mut out = spec_rules(nw);
    out.extend(policy_exists(nw, policies));
    out
}

/// §3.1 and §3.2 for an update: rules 1–22, then the update-only rules against `old`
/// (whose `status.nodeState` decides "fully uninstalled"), then rule 23.
pub fn nodewright_update(
    old: &NodeWright,
    new: &NodeWright,
    policies: Option<&dyn PolicyCatalog>,
) -> Vec<Violation> {
    let mut out = spec_rules(new);
    out.extend(update_rules(old, new));
    out.extend(policy_exists(new, policies));
    out
}

/// The full pipeline over a raw object, as the apiserver runs it: schema (§3.3) on the raw
/// value, typed decoding, metadata, then the webhook (§3.1/§3.2). Returns the typed object when
/// it decodes, and every violation found.
pub fn validate_nodewright_value(
    raw: &Value,
    old: Option<&NodeWright>,
    policies: Option<&dyn PolicyCatalog>,
) -> (Option<NodeWright>, Vec<Violation>) {
    let mut out = structural::nodewright(raw);
    let typed = match serde_json::from_value::<NodeWright>(raw.clone()) {
        Ok(nw) => nw,
        Err(e) => {
            if !super::has_errors(&out) {
                out.push(Violation::error(
                    rules::DECODE,
                    FieldPath::root(),
                    format!("cannot read the object as a NodeWright: {e}"),
                ));
            }
            return (None, out);
        }
    };
    out.extend(nodewright_metadata(&typed));
    out.extend(super::maintenance_annotations(
        typed.metadata.annotations.as_ref(),
    ));
    out.extend(super::approval_annotations(
        typed.metadata.annotations.as_ref(),
    ));
    match old {
        Some(old) => out.extend(nodewright_update(old, &typed, policies)),
        None => out.extend(nodewright_create(&typed, policies)),
    }
    (Some(typed), out)
}

fn negative_duration(
    d: Option<&GoDuration>,
    path: FieldPath,
    rule: Rule,
    message: &str,
    out: &mut Vec<Violation>,
) {
    let Some(d) = d else { return };
    match d.parse() {
        Ok(v) if v.is_negative() => out.push(Violation::error(rule, path, message)),
        Ok(_) => {}
        Err(e) => out.push(Violation::error(
            rules::DURATION_INVALID,
            path,
            e.to_string(),
        )),
    }
}

fn selector_rule(
    sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    field: &str,
    rule: Rule,
    prefix: &str,
    out: &mut Vec<Violation>,
) {
    let Some(sel) = sel else { return };
    if let Err(errs) = Selector::parse(sel) {
        for e in errs {
            let mut path = FieldPath::of(&["spec", field]);
            for seg in &e.location {
                path = match seg.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                    Some(n) => path.index(n.parse().unwrap_or(0)),
                    None => path.key(seg.as_str()),
                };
            }
            out.push(Violation::error(
                rule,
                path,
                format!("{prefix}: {}", e.message),
            ));
        }
    }
}

/// Whether a package key matches `^[a-z][-a-z0-9]{0,41}[a-z]$`.
pub fn valid_package_name(key: &str) -> bool {
    let b = key.as_bytes();
    (2..=43).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_lowercase()
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Splits an image into (inline digest, inline tag) as §3.1 rules 11–12 see them: a digest is
/// anything after `@`; a tag is anything after a `:` that follows the last `/`.
pub fn inline_digest_and_tag(image: &str) -> (Option<&str>, Option<&str>) {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rfind('/').map_or(0, |i| i + 1);
    let tag = name[last..].split_once(':').map(|(_, t)| t);
    (digest, tag)
}

/// Rules 1–22 of §3.1, in order.
fn spec_rules(nw: &NodeWright) -> Vec<Violation> {
    let spec = &nw.spec;
    let mut out = Vec::new();
    // 1
    if let Some(b) = &spec.interruption_budget
        && b.percent.is_some()
        && b.count.is_some()
    {
        out.push(Violation::error(
            rules::BUDGET_BOTH,
            FieldPath::of(&["spec", "interruptionBudget"]),
            "interruption budget: error InterruptionBudget is not valid, both percent and count can not be set at the same time",
        ));
    }
    // 2, 3
    if let Some(dc) = &spec.drain_config {
        negative_duration(
            dc.timeout.as_ref(),
            FieldPath::of(&["spec", "drainConfig", "timeout"]),
            rules::DRAIN_TIMEOUT_NEGATIVE,
            "drain config: drainConfig.timeout must be greater than or equal to 0",
            &mut out,
        );
        negative_duration(
            dc.grace_period.as_ref(),
            FieldPath::of(&["spec", "drainConfig", "gracePeriod"]),
            rules::DRAIN_GRACE_NEGATIVE,
            "drain config: drainConfig.gracePeriod must be greater than or equal to 0",
            &mut out,
        );
    }
    // 4
    if spec
        .deployment_policy
        .as_deref()
        .is_some_and(|p| !p.is_empty())
        && spec
            .interruption_budget
            .as_ref()
            .is_some_and(|b| b.percent.is_some() || b.count.is_some())
    {
        out.push(Violation::error(
            rules::POLICY_AND_BUDGET,
            FieldPath::of(&["spec", "deploymentPolicy"]),
            "deploymentPolicy and interruptionBudget are mutually exclusive",
        ));
    }
    // 5, 6
    selector_rule(
        spec.pod_non_interrupt_labels.as_ref(),
        "podNonInterruptLabels",
        rules::POD_NON_INTERRUPT_LABELS,
        "pod non-interrupt labels are not valid",
        &mut out,
    );
    selector_rule(
        spec.node_selectors.as_ref(),
        "nodeSelectors",
        rules::NODE_SELECTORS,
        "node selectors are not valid",
        &mut out,
    );
    // 7–19, per package in key order.
    for (key, pkg) in spec.packages() {
        package_rules(key, pkg, &mut out);
    }
    // 20–22
    dependency_rules(nw, &mut out);
    out
}

fn package_rules(key: &str, pkg: &Package, out: &mut Vec<Violation>) {
    let path = pkg_path(key);
    // 7
    if let Some(name) = pkg.name.as_deref()
        && !name.is_empty()
        && name != key
    {
        out.push(Violation::error(
            rules::PACKAGE_NAME_MISMATCH,
            path.key("name"),
            format!("error package {key}'s name was set to {name}. Do not explicitly set the name in the package's definition"),
        ));
    }
    // 8
    if !valid_package_name(key) {
        out.push(Violation::error(
            rules::PACKAGE_NAME_INVALID,
            path.clone(),
            format!(
                "package name [{key}] is not valid. must match [^[a-z][-a-z0-9]{{0,41}}[a-z]$]"
            ),
        ));
    }
    // 9, 10 — patterns in sorted order (the map is a BTreeMap).
    let config = pkg.config_map();
    for pattern in pkg.config_interrupts().keys() {
        if config.contains_key(pattern) {
            continue;
        }
        let ipath = path.key("configInterrupts").key(pattern.as_str());
        if glob::is_glob(pattern) {
            if !config.keys().any(|k| glob::matches(pattern, k)) {
                out.push(Violation::error(
                    rules::CONFIG_GLOB_UNMATCHED,
                    ipath,
                    format!(
                        "error config interrupt glob {pattern:?} does not match any configMap keys"
                    ),
                ));
            }
        } else {
            out.push(Violation::error(
                rules::CONFIG_KEY_MISSING,
                ipath,
                format!("error config interrupt for key that doesn't exist: {pattern} doesn't exist as a configmap"),
            ));
        }
    }
    // 11, 12
    let (digest, tag) = inline_digest_and_tag(&pkg.image);
    if digest.is_some() {
        out.push(Violation::error(
            rules::IMAGE_DIGEST,
            path.key("image"),
            format!(
                "error package {key}'s image '{}' contains an inline digest. Do not embed a digest in the image; pin the image bytes using the package's containerSHA field instead",
                pkg.image
            ),
        ));
    }
    if let Some(tag) = tag {
        out.push(Violation::error(
            rules::IMAGE_TAG,
            path.key("image"),
            format!(
                "error package {key}'s image '{}' contains an inline tag '{tag}'. Do not embed a tag in the image; the package version supplies the tag",
                pkg.image
            ),
        ));
    }
    // 13
    if !GoVersion::is_valid(&pkg.version) {
        out.push(Violation::error(
            rules::VERSION_INVALID,
            path.key("version"),
            format!("error version string for {key} is invalid: {}", pkg.version),
        ));
    }
    // 14–17
    resource_rules(key, pkg, &path, out);
    // 18
    if let Some(u) = &pkg.uninstall
        && u.apply
        && !u.enabled
    {
        out.push(Violation::error(
            rules::UNINSTALL_APPLY_WITHOUT_ENABLED,
            path.key("uninstall").key("apply"),
            format!("package {key:?}: uninstall.apply requires uninstall.enabled to be true"),
        ));
    }
    // 19
    negative_duration(
        pkg.stage_timeout.as_ref(),
        path.key("stageTimeout"),
        rules::STAGE_TIMEOUT_NEGATIVE,
        &format!("package {key:?}: stageTimeout must be greater than or equal to 0"),
        out,
    );
    if let Some(g) = &pkg.graceful_shutdown
        && let Err(e) = g.parse()
    {
        out.push(Violation::error(
            rules::DURATION_INVALID,
            path.key("gracefulShutdown"),
            e.to_string(),
        ));
    }
}

fn resource_rules(key: &str, pkg: &Package, path: &FieldPath, out: &mut Vec<Violation>) {
    let Some(r) = &pkg.resources else { return };
    let rpath = path.key("resources");
    let fields = [
        ("cpuRequest", &r.cpu_request),
        ("cpuLimit", &r.cpu_limit),
        ("memoryRequest", &r.memory_request),
        ("memoryLimit", &r.memory_limit),
    ];
    let mut parsed: Vec<Option<Quantity>> = Vec::with_capacity(4);
    let mut unreadable = false;
    for (field, q) in fields {
        match q {
            None => parsed.push(None),
            Some(q) => match Quantity::parse(&q.0) {
                Ok(v) => parsed.push(Some(v)),
                Err(e) => {
                    unreadable = true;
                    out.push(Violation::error(
                        rules::QUANTITY_INVALID,
                        rpath.key(field),
                        e.to_string(),
                    ));
                    parsed.push(None);
                }
            },
        }
    }
    if unreadable {
        return;
    }
    // A zero quantity counts as not set (§3.1 #14).
    let set: Vec<bool> = parsed
        .iter()
        .map(|q| q.is_some_and(|q| !q.is_zero()))
        .collect();
    if !set.iter().any(|s| *s) {
        return;
    }
    if !set.iter().all(|s| *s) {
        out.push(Violation::error(
            rules::RESOURCES_PARTIAL,
            rpath,
            format!("package {key:?}: if any resource override is set, all of cpuRequest, cpuLimit, memoryRequest, memoryLimit must be set"),
        ));
        return;
    }
    let text = |i: usize| {
        fields[i]
            .1
            .as_ref()
            .map(|q| q.0.clone())
            .unwrap_or_default()
    };
    let Some(vals) = parsed.iter().copied().collect::<Option<Vec<Quantity>>>() else {
        return;
    };
    let val = |i: usize| vals[i];
    if val(1) < val(0) {
        out.push(Violation::error(
            rules::CPU_LIMIT_BELOW_REQUEST,
            rpath.key("cpuLimit"),
            format!(
                "package {key:?}: cpuLimit ({}) must be >= cpuRequest ({})",
                text(1),
                text(0)
            ),
        ));
    }
    if val(3) < val(2) {
        out.push(Violation::error(
            rules::MEMORY_LIMIT_BELOW_REQUEST,
            rpath.key("memoryLimit"),
            format!(
                "package {key:?}: memoryLimit ({}) must be >= memoryRequest ({})",
                text(3),
                text(2)
            ),
        ));
    }
    if (0..4).any(|i| val(i).signum() <= 0) {
        out.push(Violation::error(
            rules::RESOURCES_NOT_POSITIVE,
            rpath,
            format!("package {key:?}: all resource values must be positive"),
        ));
    }
}

fn dependency_rules(nw: &NodeWright, out: &mut Vec<Violation>) {
    let packages = nw.spec.packages();
    let ids: BTreeSet<String> = packages
        .iter()
        .map(|(k, p)| format!("{k}|{}", p.version))
        .collect();
    // 20
    for (key, pkg) in packages {
        for (dep, version) in pkg.depends_on() {
            if version.is_empty() {
                out.push(Violation::error(
                    rules::DEPENDS_ON_VERSION_EMPTY,
                    pkg_path(key).key("dependsOn").key(dep.as_str()),
                    format!("error trying to validate NodeWright spec building graph: DependsOn version is empty for [{dep}]"),
                ));
            }
        }
    }
    // 21 — upstream builds the graph first and stops on rule 20; we keep going so every
    // problem shows, one message per package listing its missing dependencies.
    for (key, pkg) in packages {
        let missing: Vec<String> = pkg
            .depends_on()
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(d, v)| format!("{d}|{v}"))
            .filter(|id| !ids.contains(id))
            .collect();
        if !missing.is_empty() {
            out.push(Violation::error(
                rules::DEPENDS_ON_MISSING,
                pkg_path(key).key("dependsOn"),
                format!(
                    "error trying to validate NodeWright spec graph is invalid: error graph is not valid, missing: [{}]",
                    missing.join(" ")
                ),
            ));
        }
    }
    // 22
    for cycle in dependency_cycles(packages) {
        let members: Vec<String> = cycle
            .iter()
            .map(|k| format!("{k}|{}", packages[k].version))
            .collect();
        out.push(Violation::error(
            rules::DEPENDS_ON_CYCLE,
            pkg_path(&cycle[0]).key("dependsOn"),
            format!(
                "error trying to validate NodeWright spec graph is invalid: dependsOn forms a cycle: [{}]. Packages in a cycle never become runnable; remove one of these dependencies",
                members.join(" -> ")
            ),
        ));
    }
}

/// The dependency cycles among `packages` (edges only for dependencies that name an existing
/// `name|version`), each as its members in cycle order starting from the smallest name.
pub fn dependency_cycles(packages: &BTreeMap<String, Package>) -> Vec<Vec<String>> {
    let mut graph = DiGraph::<&str, ()>::new();
    let index: BTreeMap<&str, _> = packages
        .keys()
        .map(|k| (k.as_str(), graph.add_node(k.as_str())))
        .collect();
    for (key, pkg) in packages {
        for (dep, version) in pkg.depends_on() {
            if let Some(target) = packages.get(dep)
                && &target.version == version
            {
                graph.add_edge(index[key.as_str()], index[dep.as_str()], ());
            }
        }
    }
    let mut cycles: Vec<Vec<String>> = tarjan_scc(&graph)
        .into_iter()
        .filter(|scc| scc.len() > 1 || graph.contains_edge(scc[0], scc[0]))
        .map(|scc| {
            let members: BTreeSet<&str> = scc.iter().map(|n| graph[*n]).collect();
            order_cycle(packages, &members)
        })
        .collect();
    cycles.sort();
    cycles
}

/// Walks a cycle through `members` starting at the smallest name, following the smallest
/// in-component dependency each step, until it returns; lists each member once.
fn order_cycle(packages: &BTreeMap<String, Package>, members: &BTreeSet<&str>) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    let Some(start) = members.first().copied() else {
        return order;
    };
    let mut current = start;
    loop {
        order.push(current.to_string());
        let next = packages[current]
            .depends_on()
            .iter()
            .filter(|(d, v)| {
                members.contains(d.as_str()) && packages.get(*d).is_some_and(|p| &p.version == *v)
            })
            .map(|(d, _)| d.as_str())
            .find(|d| !order.iter().any(|o| o == d));
        match next {
            Some(n) => current = n,
            None => break,
        }
    }
    // Members not on the walked path (several interleaved cycles) are appended in name order.
    for m in members {
        if !order.iter().any(|o| o == m) {
            order.push(m.to_string());
        }
    }
    order.push(order[0].clone());
    order
}

/// Whether no node in the old object's `status.nodeState` holds `<name>|<version>` (§3.2).
fn fully_uninstalled(old: &NodeWright, name: &str, version: &str) -> bool {
    old.status
        .as_ref()
        .and_then(|s| s.node_state.as_ref())
        .is_none_or(|nodes| nodes.values().all(|st| st.get(name, version).is_none()))
}

/// §3.2 rules in order.
fn update_rules(old: &NodeWright, new: &NodeWright) -> Vec<Violation> {
    let mut out = Vec::new();
    let new_pkgs = new.spec.packages();
    for (name, old_pkg) in old.spec.packages() {
        let path = pkg_path(name);
        match new_pkgs.get(name) {
            None => {
                if old_pkg.uninstall_enabled() && !fully_uninstalled(old, name, &old_pkg.version) {
                    out.push(Violation::error(
                        rules::UNINSTALL_REMOVAL,
                        FieldPath::of(&["spec", "packages"]),
                        format!("package {name:?} has uninstall.enabled=true; set uninstall.apply=true and wait for completion before removing from spec"),
                    ));
                }
            }
            Some(new_pkg) => {
                if old_pkg.uninstall_enabled()
                    && let (Ok(o), Ok(n)) = (
                        GoVersion::parse(&old_pkg.version),
                        GoVersion::parse(&new_pkg.version),
                    )
                    && n.compare(&o).is_lt()
                {
                    if !old_pkg.is_uninstalling() {
                        out.push(Violation::error(
                            rules::UNINSTALL_DOWNGRADE_APPLY_FIRST,
                            path.key("version"),
                            format!("package {name:?}: downgrade not allowed — set uninstall.apply=true first, wait for uninstall to complete, then change version"),
                        ));
                    } else if !fully_uninstalled(old, name, &old_pkg.version) {
                        out.push(Violation::error(
                            rules::UNINSTALL_DOWNGRADE_INCOMPLETE,
                            path.key("version"),
                            format!("package {name:?}: downgrade not allowed — uninstall has not yet completed on all nodes. Wait for the uninstall to finish, then change version"),
                        ));
                    }
                }
                if old_pkg.is_uninstalling() && !new_pkg.is_uninstalling() {
                    out.push(Violation::warning(
                        rules::UNINSTALL_CANCELLED,
                        path.key("uninstall").key("apply"),
                        format!("package {name:?}: uninstall cancelled — nodes where uninstall completed will need to re-install"),
                    ));
                }
            }
        }
    }
    out
}

/// Rule 23: the named policy must exist (checked last, not wrapped).
fn policy_exists(nw: &NodeWright, policies: Option<&dyn PolicyCatalog>) -> Option<Violation> {
    let catalog = policies?;
    let name = nw
        .spec
        .deployment_policy
        .as_deref()
        .filter(|n| !n.is_empty())?;
    let path = FieldPath::of(&["spec", "deploymentPolicy"]);
    match catalog.policy_exists(name) {
        Ok(true) => None,
        Ok(false) => Some(Violation::error(
            rules::POLICY_NOT_FOUND,
            path,
            format!("deploymentPolicy {name:?} not found"),
        )),
        Err(e) => Some(Violation::error(
            rules::POLICY_NOT_FOUND,
            path,
            format!("error checking if deploymentPolicy {name:?} exists: {e}"),
        )),
    }
}
