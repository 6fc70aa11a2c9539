//! Executing the reconciler's [`Action`]s against the world with Kubernetes semantics, the
//! materialization of desired CRs, fault injection, and the action-time invariant checks of
//! spec/scenarios.md §6 (3: no interrupt before drain; 4: no uncordon of a foreign cordon;
//! 5: every node annotation the reconciler writes parses).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::job::Job;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeStatus, Pod};
use nodewright_schema::keys;
use nodewright_schema::node_state::NodeState;
use nodewright_schema::{DeploymentPolicy, NodeWright, Status};
use nodewright_schema::{selector, toleration};

use super::nodes::taints;
use super::util;
use super::workload::{EvictionError, phase};
use super::{SimCluster, Violation};
use crate::cluster::{ClusterError, Desired};
use crate::plan::{Action, EventObject, NodePatch, Outcome, apply_node_patch};

/// A period during which a share of API writes fail (409 conflict or 500).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultWindow {
    /// Share of writes that fail, 0–1.
    pub rate: f64,
    /// End of the window.
    pub until: Timestamp,
}

impl SimCluster {
    /// Makes a share of API writes fail from now on for a while.
    pub fn fail_api(&mut self, window: FaultWindow) {
        self.faults.push(window);
    }

    fn injected_fault(&mut self, action: &Action) -> Option<Result<Outcome, ClusterError>> {
        let now = self.now;
        self.faults.retain(|w| w.until > now);
        let rate = self.faults.iter().map(|w| w.rate).fold(0.0, f64::max);
        if rate <= 0.0 || self.rng.next_f64() >= rate {
            return None;
        }
        if self.rng.next_u64().is_multiple_of(2) {
            Some(Ok(Outcome::Conflict))
        } else {
            Some(Err(ClusterError::Api {
                action: action.kind().to_string(),
                status: 500,
                message: "Internal error occurred: injected by failApi".into(),
            }))
        }
    }

    /// Merges annotations into a Job (only the Job of `uid`, when given) and sets its TTL.
    fn annotate_job(
        &mut self,
        name: &str,
        uid: Option<&str>,
        annotations: &BTreeMap<String, String>,
        ttl_seconds_after_finished: Option<i32>,
    ) -> Outcome {
        let rv = self.next_rv();
        let Some(job) = self.jobs.get_mut(name) else {
            return Outcome::NotFound;
        };
        if uid.is_some_and(|u| job.metadata.uid.as_deref() != Some(u)) {
            return Outcome::NotFound;
        }
        job.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(annotations.clone());
        if let Some(ttl) = ttl_seconds_after_finished {
            let spec = job.spec.get_or_insert_with(Default::default);
            if spec.ttl_seconds_after_finished != Some(ttl) {
                Arc::make_mut(spec).ttl_seconds_after_finished = Some(ttl);
                job.metadata.generation = Some(job.metadata.generation.unwrap_or(1) + 1);
            }
        }
        job.metadata.resource_version = Some(rv);
        self.dirty_jobs.insert(name.to_string());
        self.settle();
        Outcome::Done
    }

    /// Executes one action. Expected non-successes are [`Outcome`]s.
    pub fn execute(&mut self, action: &Action) -> Result<Outcome, ClusterError> {
        if let Some(fault) = self.injected_fault(action) {
            return fault;
        }
        let outcome = match action {
            Action::PatchNode(patch) => self.patch_node(patch)?,
            Action::PatchNodeConditions { node, set, remove } => {
                let rv = self.next_rv();
                let Some(n) = self.nodes.get_mut(node) else {
                    return Ok(Outcome::NotFound);
                };
                let conditions = n
                    .status
                    .get_or_insert_with(NodeStatus::default)
                    .conditions
                    .get_or_insert_with(Vec::new);
                conditions.retain(|c| !remove.contains(&c.type_));
                for c in set {
                    match conditions.iter_mut().find(|x| x.type_ == c.type_) {
                        Some(x) => *x = c.clone(),
                        None => conditions.insert(0, c.clone()),
                    }
                }
                n.metadata.resource_version = Some(rv);
                Outcome::Done
            }
            Action::CreateJob(job) => {
                let job = job.job().into_owned();
                self.check_interrupt_after_drain(&job);
                self.create_job(job)
            }
            Action::DeleteJob { name, uid, .. } => self.delete_job(name, uid.as_deref()),
            Action::SuspendJob { name, suspend } => self.suspend_job(name, *suspend),
            Action::AnnotateJob {
                name,
                uid,
                annotations,
                ttl_seconds_after_finished,
            } => self.annotate_job(
                name,
                uid.as_deref(),
                annotations,
                *ttl_seconds_after_finished,
            ),
            Action::SnapshotLastLogs {
                job,
                uid,
                namespace,
                pod,
                container,
                fallback,
            } => {
                if self.jobs.get(job).is_none_or(|j| {
                    uid.as_deref()
                        .is_some_and(|u| j.metadata.uid.as_deref() != Some(u))
                }) {
                    return Ok(Outcome::NotFound);
                }
                let read = self.pod_logs(&crate::cluster::last_logs_request(
                    namespace, pod, container,
                ));
                let text = crate::cluster::last_logs_value(read, container, fallback.as_deref());
                let annotations =
                    BTreeMap::from([(keys::JOB_ANNOTATION_LAST_LOGS.to_string(), text)]);
                self.annotate_job(job, uid.as_deref(), &annotations, None)
            }
            Action::FailJob { name, reason } => self.fail_job(name, reason),
            Action::EvictPod(pod) => {
                match self.evict(&pod.namespace, &pod.name, pod.grace_period_seconds) {
                    Ok(()) => {
                        self.history
                            .record(self.now, format!("evict {}/{}", pod.namespace, pod.name));
                        Outcome::Done
                    }
                    Err(EvictionError::NotFound(_)) => Outcome::NotFound,
                    Err(EvictionError::Refused { cause, .. }) => {
                        Outcome::EvictionRefused { message: cause }
                    }
                    Err(e @ EvictionError::MultiplePdbs(_)) => {
                        return Err(ClusterError::Api {
                            action: format!("evict {}/{}", pod.namespace, pod.name),
                            status: 500,
                            message: e.to_string(),
                        });
                    }
                }
            }
            Action::DeletePod(pod) => {
                if self.delete_pod(&pod.namespace, &pod.name, pod.grace_period_seconds) {
                    self.history.record(
                        self.now,
                        format!("delete-pod {}/{}", pod.namespace, pod.name),
                    );
                    Outcome::Done
                } else {
                    Outcome::NotFound
                }
            }
            Action::UpsertConfigMap(cm) => {
                self.upsert_config_map(cm);
                Outcome::Done
            }
            Action::DeleteConfigMap { name } => {
                match self
                    .config_maps
                    .remove(&(self.namespace.clone(), name.clone()))
                {
                    Some(_) => Outcome::Done,
                    None => Outcome::NotFound,
                }
            }
            Action::PatchNodeWrightStatus { name, patch } => {
                let rv = self.next_rv();
                let Some(nw) = self.nodewrights.get_mut(name) else {
                    return Ok(Outcome::NotFound);
                };
                let had = nw.status.is_some();
                if patch.apply(nw.status.get_or_insert_with(Default::default)) || !had {
                    nw.metadata.resource_version = Some(rv);
                }
                Outcome::Done
            }
            Action::PatchNodeWrightAnnotations { name, annotations } => {
                let rv = self.next_rv();
                let Some(nw) = self.nodewrights.get_mut(name) else {
                    return Ok(Outcome::NotFound);
                };
                let current = nw.metadata.annotations.get_or_insert_with(BTreeMap::new);
                for (key, value) in annotations {
                    match value {
                        Some(v) => current.insert(key.clone(), v.clone()),
                        None => current.remove(key),
                    };
                }
                nw.metadata.resource_version = Some(rv);
                Outcome::Done
            }
            Action::SetFinalizer { name, present } => {
                let rv = self.next_rv();
                let Some(nw) = self.nodewrights.get_mut(name) else {
                    return Ok(Outcome::NotFound);
                };
                let finalizers = nw.metadata.finalizers.get_or_insert_with(Vec::new);
                let has = finalizers.iter().any(|f| f == keys::FINALIZER);
                if *present && !has {
                    finalizers.push(keys::FINALIZER.into());
                } else if !*present && has {
                    finalizers.retain(|f| f != keys::FINALIZER);
                }
                nw.metadata.resource_version = Some(rv);
                if nw.metadata.deletion_timestamp.is_some()
                    && nw.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty())
                {
                    self.nodewrights.remove(name);
                }
                Outcome::Done
            }
            Action::RecordEvent(event) => {
                let (kind, object) = match &event.object {
                    EventObject::Node(n) => ("Node", n.as_str()),
                    EventObject::NodeWright(n) => (keys::KIND_NODEWRIGHT, n.as_str()),
                };
                self.record_event(
                    kind,
                    object,
                    event.kind.as_str(),
                    &event.reason,
                    &event.message,
                );
                Outcome::Done
            }
        };
        self.settle();
        Ok(outcome)
    }

    fn upsert_config_map(&mut self, cm: &ConfigMap) {
        let ns = cm
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| self.namespace.clone());
        let name = cm.metadata.name.clone().unwrap_or_default();
        let key = (ns.clone(), name.clone());
        match self.config_maps.get(&key).cloned() {
            Some(mut existing) => {
                let changed = existing.data != cm.data
                    || existing.binary_data != cm.binary_data
                    || existing.metadata.labels != cm.metadata.labels
                    || existing.metadata.annotations != cm.metadata.annotations
                    || existing.metadata.owner_references != cm.metadata.owner_references;
                if changed {
                    existing.data = cm.data.clone();
                    existing.binary_data = cm.binary_data.clone();
                    existing.metadata.labels = cm.metadata.labels.clone();
                    existing.metadata.annotations = cm.metadata.annotations.clone();
                    existing.metadata.owner_references = cm.metadata.owner_references.clone();
                    self.touch(&mut existing.metadata);
                    self.config_maps.insert(key, existing);
                }
            }
            None => {
                let mut meta = self.new_meta(&name, Some(&ns));
                meta.labels = cm.metadata.labels.clone();
                meta.annotations = cm.metadata.annotations.clone();
                meta.owner_references = cm.metadata.owner_references.clone();
                let created = ConfigMap {
                    metadata: meta,
                    data: cm.data.clone(),
                    binary_data: cm.binary_data.clone(),
                    immutable: cm.immutable,
                };
                self.config_maps.insert(key, created);
            }
        }
    }

    /// Merges a node delta onto the node's current value; atomic (nothing is written when a
    /// node-state annotation does not parse).
    fn patch_node(&mut self, patch: &NodePatch) -> Result<Outcome, ClusterError> {
        let Some(before) = self.nodes.get(&patch.node).cloned() else {
            return Ok(Outcome::NotFound);
        };
        let mut node = before.clone();
        apply_node_patch(&mut node, patch).map_err(|source| ClusterError::MalformedNodeState {
            node: patch.node.clone(),
            source,
        })?;
        let empty = BTreeMap::new();
        let old_annotations = before.metadata.annotations.as_ref().unwrap_or(&empty);
        let touched: BTreeSet<String> = node
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, v)| old_annotations.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect();
        self.check_uncordon(&before, &node, patch);
        self.check_annotations_parse(&node, &touched);
        self.record_node_history(&before, &node);
        self.touch(&mut node.metadata);
        self.nodes.insert(patch.node.clone(), node);
        self.sync_lifecycle_taints(&patch.node);
        self.taint_manager(&patch.node);
        Ok(Outcome::Done)
    }

    fn record_node_history(&mut self, before: &Node, after: &Node) {
        let name = after.metadata.name.clone().unwrap_or_default();
        let unsched = |n: &Node| {
            n.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
        };
        match (unsched(before), unsched(after)) {
            (false, true) => self.history.record(self.now, format!("cordon {name}")),
            (true, false) => self.history.record(self.now, format!("uncordon {name}")),
            _ => {}
        }
        let keys_of = |n: &Node| {
            taints(n)
                .iter()
                .map(|t| t.key.clone())
                .collect::<BTreeSet<_>>()
        };
        let (tb, ta) = (keys_of(before), keys_of(after));
        for k in ta.difference(&tb) {
            self.history.record(self.now, format!("taint {name} {k}"));
        }
        for k in tb.difference(&ta) {
            self.history.record(self.now, format!("untaint {name} {k}"));
        }
        let empty = BTreeMap::new();
        let ab = before.metadata.annotations.as_ref().unwrap_or(&empty);
        for (k, v) in after.metadata.annotations.iter().flatten() {
            if ab.get(k) != Some(v) {
                self.history
                    .record(self.now, format!("annotate {name} {k}"));
            }
        }
    }

    /// Invariant 4: an uncordon is only allowed to a NodeWright releasing its own cordon, with no
    /// other cordon owner and no persistent runtime-required cordon left.
    fn check_uncordon(&mut self, before: &Node, after: &Node, patch: &NodePatch) {
        let unsched = |n: &Node| {
            n.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
        };
        if !unsched(before) || unsched(after) {
            return;
        }
        let owners = |n: &Node| -> Vec<String> {
            n.metadata
                .annotations
                .iter()
                .flatten()
                .filter(|(k, _)| keys::is_cordon_key(k))
                .map(|(k, _)| k.clone())
                .collect()
        };
        let persistent = after
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(keys::RUNTIME_REQUIRED_CORDON));
        let message = if owners(before).is_empty() {
            Some(format!(
                "node {} was uncordoned, but its cordon carried no cordon_* annotation: the reconciler does not own it",
                patch.node
            ))
        } else if !owners(after).is_empty() {
            Some(format!(
                "node {} was uncordoned while {} still own its cordon",
                patch.node,
                owners(after).join(", ")
            ))
        } else if persistent {
            Some(format!(
                "node {} was uncordoned while it carries {}",
                patch.node,
                keys::RUNTIME_REQUIRED_CORDON
            ))
        } else {
            None
        };
        if let Some(message) = message {
            self.violations.push(Violation {
                at: self.now,
                invariant: 4,
                message,
            });
        }
    }

    /// Invariant 5: the reconciler's node annotations parse.
    fn check_annotations_parse(&mut self, node: &Node, touched: &BTreeSet<String>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        for key in touched {
            let Some(value) = node.metadata.annotations.as_ref().and_then(|a| a.get(key)) else {
                continue;
            };
            let Some(rest) = key.strip_prefix(keys::PREFIX) else {
                continue;
            };
            let error = if rest.starts_with(keys::node_key::NODE_STATE) {
                NodeState::parse(value).err().map(|e| e.to_string())
            } else if rest.starts_with(keys::node_key::STATUS) {
                value.parse::<Status>().err().map(|e| e.to_string())
            } else if rest.starts_with(keys::node_key::DRAIN_START) {
                value.parse::<Timestamp>().err().map(|e| e.to_string())
            } else if rest.starts_with(keys::node_key::DRAIN_BLOCKED)
                || rest.starts_with(keys::node_key::CONFIG_APPLIED)
            {
                serde_json::from_str::<serde_json::Value>(value)
                    .err()
                    .map(|e| e.to_string())
            } else {
                None
            };
            if let Some(error) = error {
                self.violations.push(Violation {
                    at: self.now,
                    invariant: 5,
                    message: format!("node {name}: annotation {key}={value:?} written by the reconciler does not parse: {error}"),
                });
            }
        }
    }

    /// Invariant 3: an interrupt Job starts only on a cordoned, drained node (§7).
    fn check_interrupt_after_drain(&mut self, job: &Job) {
        let Some(labels) = job.metadata.labels.as_ref() else {
            return;
        };
        if labels.get(keys::JOB_LABEL_INTERRUPT).map(String::as_str) != Some("True") {
            return;
        }
        let Some(node) = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.node_name.clone())
        else {
            return;
        };
        if self
            .jobs
            .contains_key(job.metadata.name.as_deref().unwrap_or_default())
        {
            return; // AlreadyExists: nothing starts.
        }
        let nw = labels
            .get(keys::JOB_LABEL_NAME)
            .and_then(|n| self.nodewrights.get(n));
        if let Some(reason) = self.undrained_reason(&node, nw) {
            self.violations.push(Violation {
                at: self.now,
                invariant: 3,
                message: format!(
                    "interrupt Job {} created on {node} before its drain completed: {reason}",
                    job.metadata.name.clone().unwrap_or_default()
                ),
            });
        }
    }

    /// Why a node is not cordoned and drained for a NodeWright (§7.5–§7.8), if it is not.
    pub fn undrained_reason(&self, node: &str, nw: Option<&NodeWright>) -> Option<String> {
        let n = self.nodes.get(node)?;
        if !n
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
        {
            return Some("the node is not cordoned".into());
        }
        let drain = nw
            .and_then(|nw| nw.spec.drain_config.clone())
            .unwrap_or_default();
        let barrier = nw.and_then(|nw| nw.spec.pod_non_interrupt_labels.clone());
        let unsched_taint = k8s_openapi::api::core::v1::Taint {
            key: keys::TAINT_UNSCHEDULABLE.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        for pod in self.pods_on(node) {
            let name = format!(
                "{}/{}",
                pod.metadata.namespace.clone().unwrap_or_default(),
                pod.metadata.name.clone().unwrap_or_default()
            );
            if !matches!(phase(pod), "Running" | "Pending") {
                continue;
            }
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            if let Some(sel) = &barrier
                && (sel.match_labels.as_ref().is_some_and(|m| !m.is_empty())
                    || sel
                        .match_expressions
                        .as_ref()
                        .is_some_and(|m| !m.is_empty()))
                && selector::matches(Some(sel), &labels)
            {
                return Some(format!("non-interrupt pod {name} is still {}", phase(pod)));
            }
            if is_package_pod(pod, &self.namespace) {
                continue;
            }
            let tolerations = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.clone())
                .unwrap_or_default();
            if toleration::tolerated(&tolerations, &unsched_taint) {
                continue;
            }
            let owner = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true));
            if drain.ignore_daemon_sets() && owner.is_some_and(|o| o.kind == "DaemonSet") {
                continue;
            }
            if pod
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(keys::MIRROR_POD_ANNOTATION))
            {
                continue;
            }
            return Some(format!("pod {name} is still on the node"));
        }
        None
    }

    /// Makes the cluster's NodeWrights and policies match `desired`: create or update the
    /// declared spec, labels and annotations (keeping status and annotations others set), and
    /// delete what Git no longer declares (a NodeWright with finalizers gets a
    /// deletionTimestamp and stays until they are removed).
    pub fn apply_desired(&mut self, desired: &Desired) {
        let wanted: BTreeSet<String> = desired
            .nodewrights
            .iter()
            .map(|n| n.metadata.name.clone().unwrap_or_default())
            .collect();
        for nw in &desired.nodewrights {
            self.apply_nodewright(nw, Some(&desired.commit));
        }
        let gone: Vec<String> = self
            .nodewrights
            .keys()
            .filter(|n| !wanted.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            self.delete_nodewright(&name);
        }
        let wanted: BTreeSet<String> = desired
            .policies
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        for policy in &desired.policies {
            self.apply_policy(policy);
        }
        self.policies.retain(|n, _| wanted.contains(n));
    }

    /// Server-side apply of one declared NodeWright (the in-process materialization and the
    /// `application/apply-patch+yaml` requests of `sim serve` share it): spec and labels are
    /// replaced, declared annotations set and those declared last time but not now removed,
    /// and `commit`, when given, recorded as the source commit. A NodeWright being deleted is
    /// left alone. Returns whether the object changed.
    pub fn apply_nodewright(&mut self, nw: &NodeWright, commit: Option<&str>) -> bool {
        let name = nw.metadata.name.clone().unwrap_or_default();
        let declared: BTreeMap<String, String> =
            nw.metadata.annotations.clone().unwrap_or_default();
        let previous = self
            .git_annotations
            .insert(name.clone(), declared.keys().cloned().collect())
            .unwrap_or_default();
        let rv = self.next_rv();
        match self.nodewrights.get_mut(&name) {
            Some(live) if live.metadata.deletion_timestamp.is_none() => {
                let annotations = live.metadata.annotations.get_or_insert_with(BTreeMap::new);
                let before = annotations.clone();
                for k in previous.difference(&declared.keys().cloned().collect()) {
                    annotations.remove(k);
                }
                annotations.extend(declared.clone());
                if let Some(commit) = commit {
                    annotations.insert(keys::SOURCE_COMMIT.into(), commit.to_string());
                }
                let mut changed = *annotations != before;
                if live.metadata.labels != nw.metadata.labels && nw.metadata.labels.is_some() {
                    live.metadata.labels = nw.metadata.labels.clone();
                    changed = true;
                }
                if live.spec != nw.spec {
                    live.spec = nw.spec.clone();
                    live.metadata.generation = Some(live.metadata.generation.unwrap_or(1) + 1);
                    changed = true;
                }
                if changed {
                    live.metadata.resource_version = Some(rv);
                }
                changed
            }
            Some(_) => false,
            None => {
                let mut meta = self.new_meta(&name, None);
                meta.generation = Some(1);
                meta.labels = nw.metadata.labels.clone();
                meta.finalizers = nw.metadata.finalizers.clone();
                let mut annotations = declared;
                if let Some(commit) = commit {
                    annotations.insert(keys::SOURCE_COMMIT.into(), commit.to_string());
                }
                meta.annotations = Some(annotations);
                let created = NodeWright {
                    metadata: meta,
                    spec: nw.spec.clone(),
                    status: None,
                };
                self.nodewrights.insert(name, created);
                true
            }
        }
    }

    /// Server-side apply of one declared DeploymentPolicy: the spec is replaced (the
    /// generation bumps when it changes); a new policy keeps its labels and annotations.
    /// Returns whether the object changed.
    pub fn apply_policy(&mut self, policy: &DeploymentPolicy) -> bool {
        let name = policy.metadata.name.clone().unwrap_or_default();
        let rv = self.next_rv();
        match self.policies.get_mut(&name) {
            Some(live) => {
                if live.spec != policy.spec {
                    live.spec = policy.spec.clone();
                    live.metadata.generation = Some(live.metadata.generation.unwrap_or(1) + 1);
                    live.metadata.resource_version = Some(rv);
                    true
                } else {
                    false
                }
            }
            None => {
                let mut meta = self.new_meta(&name, None);
                meta.generation = Some(1);
                meta.labels = policy.metadata.labels.clone();
                meta.annotations = policy.metadata.annotations.clone();
                let mut created = policy.clone();
                created.metadata = meta;
                self.policies.insert(name, created);
                true
            }
        }
    }

    /// Deletes a NodeWright: a deletionTimestamp while finalizers remain, else gone.
    pub fn delete_nodewright(&mut self, name: &str) -> bool {
        let now = util::time(self.now);
        let rv = self.next_rv();
        let Some(nw) = self.nodewrights.get_mut(name) else {
            return false;
        };
        if nw
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| !f.is_empty())
        {
            if nw.metadata.deletion_timestamp.is_none() {
                nw.metadata.deletion_timestamp = Some(now);
                nw.metadata.resource_version = Some(rv);
            }
        } else {
            self.nodewrights.remove(name);
        }
        self.git_annotations.remove(name);
        true
    }

    /// Sets and removes annotations on a NodeWright as an outside party (no generation bump).
    pub fn annotate_nodewright(
        &mut self,
        name: &str,
        set: &BTreeMap<String, String>,
        remove: &[String],
    ) -> bool {
        let rv = self.next_rv();
        let Some(nw) = self.nodewrights.get_mut(name) else {
            return false;
        };
        let annotations = nw.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.extend(set.clone());
        for k in remove {
            annotations.remove(k);
        }
        nw.metadata.resource_version = Some(rv);
        true
    }
}

fn is_package_pod(pod: &Pod, namespace: &str) -> bool {
    pod.metadata.namespace.as_deref() == Some(namespace)
        && pod.metadata.labels.as_ref().is_some_and(|l| {
            l.contains_key(keys::JOB_LABEL_NAME) && l.contains_key(keys::JOB_LABEL_PACKAGE)
        })
}
