//! Pods created through the API (bare pods: another controller's, or a user's): the
//! apiserver's defaulting, then the scheduler (unless `nodeName` is set) and the simulated
//! kubelet, which runs them as it runs Job pods — init containers in order through the
//! scenario's image behaviour, the pod's restart policy, reboots — except that the main
//! containers keep running (Ready) until the pod is deleted or evicted.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodSpec, PodStatus, Toleration,
};
use nodewright_schema::keys;

use super::util;
use super::workload::{PodKind, PodRt, set_pod_condition};
use super::{Key, SimCluster};
use crate::plan::Outcome;

/// What the DefaultTolerationSeconds admission plugin gives every pod: five minutes on a
/// not-ready or unreachable node before the taint manager evicts it.
const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// `(image, tag)` of an image reference (`repo/name:tag`, `repo/name@digest`).
pub fn split_image(image: &str) -> (String, String) {
    if let Some((bare, digest)) = image.split_once('@') {
        return (bare.to_string(), digest.to_string());
    }
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(i) => {
            let (bare, tag) = image.split_at(slash + i);
            (bare.to_string(), tag[1..].to_string())
        }
        None => (image.to_string(), String::new()),
    }
}

/// The package an API pod's containers act for: the one its package annotation names (an
/// operator's interrupt pod runs the agent's image for its package, §4.7), else the image of
/// its first init container (a stage pod copies its package's image first), else of its
/// first container.
pub(super) fn api_pod_package(pod: &Pod) -> (String, String) {
    if let Some(named) = annotated_package(pod) {
        return named;
    }
    let spec = pod.spec.as_ref();
    let image = spec
        .and_then(|s| s.init_containers.as_ref())
        .and_then(|l| l.first())
        .or_else(|| spec.and_then(|s| s.containers.first()))
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    split_image(&image)
}

/// `(image, version)` of the package annotation's JSON, current or legacy key, when it names
/// both.
fn annotated_package(pod: &Pod) -> Option<(String, String)> {
    let annotations = pod.metadata.annotations.as_ref()?;
    let text = annotations
        .get(keys::JOB_ANNOTATION_PACKAGE)
        .or_else(|| annotations.get(&keys::legacy(keys::JOB_ANNOTATION_PACKAGE)))?;
    let package: serde_json::Value = serde_json::from_str(text).ok()?;
    let field = |name: &str| package.get(name)?.as_str().map(str::to_string);
    let (image, _) = split_image(&field("image")?);
    Some((image, field("version")?))
}

/// The pod as the apiserver's defaulting and admission leave it (restart policy, grace
/// period, scheduler, image pull policy, the default not-ready/unreachable tolerations).
pub fn default_pod(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    spec.enable_service_links.get_or_insert(true);
    spec.priority.get_or_insert(0);
    let containers = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut());
    for c in containers {
        let (_, tag) = split_image(c.image.as_deref().unwrap_or_default());
        c.image_pull_policy.get_or_insert_with(|| {
            if tag.is_empty() || tag == "latest" {
                "Always".into()
            } else {
                "IfNotPresent".into()
            }
        });
        c.termination_message_path
            .get_or_insert_with(|| "/dev/termination-log".into());
        c.termination_message_policy
            .get_or_insert_with(|| "File".into());
    }
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for key in [keys::TAINT_NOT_READY, keys::TAINT_UNREACHABLE] {
        let covered = tolerations.iter().any(|t| {
            t.key.as_deref() == Some(key) && t.effect.as_deref().is_none_or(|e| e == "NoExecute")
        });
        if !covered {
            tolerations.push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(DEFAULT_TOLERATION_SECONDS),
                ..Toleration::default()
            });
        }
    }
}

impl SimCluster {
    /// Creates a pod sent through the API (already validated and defaulted): bound pods go
    /// to their node's kubelet, others to the scheduler.
    pub fn create_api_pod(&mut self, pod: Pod) -> Outcome {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| self.namespace.clone());
        let key: Key = (namespace.clone(), name.clone());
        if self.pods.contains_key(&key) {
            return Outcome::AlreadyExists;
        }
        let mut meta = self.new_meta(&name, Some(&namespace));
        meta.labels = pod.metadata.labels;
        meta.annotations = pod.metadata.annotations;
        meta.owner_references = pod.metadata.owner_references;
        meta.finalizers = pod.metadata.finalizers;
        meta.generate_name = pod.metadata.generate_name;
        let created = Pod {
            metadata: meta,
            spec: pod.spec,
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                qos_class: Some("BestEffort".into()),
                ..PodStatus::default()
            }),
        };
        let bound = created
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some();
        self.insert_pod(key.clone(), created, PodRt::new(PodKind::Api));
        if bound {
            self.kubelet_admit(&key);
        }
        self.settle();
        Outcome::Done
    }

    /// The kubelet starts an API pod's main containers once its init containers are done:
    /// they run, Ready, until the pod is deleted.
    pub(super) fn api_pod_running(&mut self, key: &Key) {
        let now = util::time(self.now);
        let Some(pod) = self.pods.get_mut(key) else {
            return;
        };
        let spec = pod.spec.clone().unwrap_or_default();
        let st = pod.status.get_or_insert_with(PodStatus::default);
        st.phase = Some("Running".into());
        let restarts = |name: &str, st: &PodStatus| {
            st.container_statuses
                .iter()
                .flatten()
                .find(|c| c.name == name)
                .map_or(0, |c| c.restart_count)
        };
        st.container_statuses = Some(
            spec.containers
                .iter()
                .map(|c| ContainerStatus {
                    name: c.name.clone(),
                    image: c.image.clone().unwrap_or_default(),
                    ready: true,
                    started: Some(true),
                    restart_count: restarts(&c.name, st),
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: Some(now.clone()),
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                })
                .collect(),
        );
        set_pod_condition(pod, "Initialized", "True", None, None, &now);
        set_pod_condition(pod, "ContainersReady", "True", None, None, &now);
        set_pod_condition(pod, "Ready", "True", None, None, &now);
        for c in &spec.containers {
            self.log_start(key, &c.name);
        }
        self.bump_pod(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_split_into_name_and_tag_or_digest() {
        assert_eq!(
            split_image("ghcr.io/nvidia/skyhook/agent:6.1.0"),
            ("ghcr.io/nvidia/skyhook/agent".into(), "6.1.0".into())
        );
        assert_eq!(
            split_image("localhost:5000/pkg"),
            ("localhost:5000/pkg".into(), String::new())
        );
        assert_eq!(
            split_image("pkg@sha256:abc"),
            ("pkg".into(), "sha256:abc".into())
        );
    }
}
