//! Stage and interrupt Job builders (spec/operator.md §8.1–§8.6, §8.16) and the Job
//! facts the rest of the engine reads back (conditions, labels, the package annotation).
//!
//! The shape is part of the wire contract: upstream e2e tests compare the raw `package`
//! annotation, and the staleness rules of §8.14 compare what a Job carries with what would be
//! built now, so the builders and [`job_matches`] live side by side.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::job::Job;
use base64::Engine as _;
use k8s_openapi::api::batch::v1::{
    JobSpec, PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EnvVar, HostPathVolumeSource, LocalObjectReference, PodSpec,
    PodTemplateSpec, ResourceRequirements, SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use nodewright_schema::duration::parse_go_duration;
use nodewright_schema::{Interrupt, NodeWright, Package, Stage, keys, names};
use serde::{Deserialize, Serialize};

use crate::settings::Settings;

/// Container path where the package image ships its content.
const PACKAGE_DIR: &str = "/skyhook-package";
/// Mount point of the host root in every working container.
const ROOT_MOUNT_PATH: &str = "/root";
/// Volume name of the host root.
const ROOT_MOUNT: &str = "root-mount";
/// The shell every package image is guaranteed to have (§8.3).
const SHELL: &str = "/bin/sh";
/// Upstream's largest valid `activeDeadlineSeconds` / backoff (`math.MaxInt32`).
const MAX_INT32: i64 = i32::MAX as i64;

/// Who the Job belongs to: the parts of the NodeWright that end up in names, env and owners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// NodeWright name.
    pub name: String,
    /// NodeWright UID.
    pub uid: String,
    /// `metadata.generation` when the Job is built.
    pub generation: i64,
}

impl Owner {
    /// The owner facts of a NodeWright.
    pub fn of(nw: &NodeWright) -> Owner {
        Owner {
            name: nw.name().to_string(),
            uid: nw.metadata.uid.clone().unwrap_or_default(),
            generation: nw.metadata.generation.unwrap_or_default(),
        }
    }

    /// `<nw>-<uid>-<generation>` (the `resource-id` annotation, §4.7).
    pub fn resource_id(&self) -> String {
        format!("{}-{}-{}", self.name, self.uid, self.generation)
    }

    fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: keys::API_VERSION.to_string(),
            kind: keys::KIND_NODEWRIGHT.to_string(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

/// The `package` annotation on Jobs and pod templates (§4.7), field order fixed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct PackageAnnotation {
    /// Package name.
    pub name: String,
    /// Package version.
    pub version: String,
    /// NodeWright name (legacy field name).
    pub skyhook: String,
    /// Stage the Job runs.
    pub stage: String,
    /// Bare image.
    pub image: String,
    /// Pin, omitted when empty.
    #[serde(
        rename = "containerSHA",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub container_sha: String,
    /// Set when the Job was invalidated (§4.7); omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invalid: bool,
}

impl PackageAnnotation {
    /// The compact wire form.
    pub fn to_json(&self) -> String {
        // A struct of strings and a bool always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What one stage Job runs: package, stage, node and the node's order (§5.14).
#[derive(Clone, Copy, Debug)]
pub struct StageJobInput<'a> {
    /// Package name (the spec map key).
    pub package_name: &'a str,
    /// The spec package.
    pub package: &'a Package,
    /// The stage to run (never an interrupt stage).
    pub stage: Stage,
    /// Node name.
    pub node: &'a str,
    /// `SKYHOOK_NODE_ORDER`.
    pub node_order: i64,
}

/// What one interrupt Job runs (§8.16): the owner package, the merged interrupt, the node.
#[derive(Clone, Copy, Debug)]
pub struct InterruptJobInput<'a> {
    /// The package that owns the (merged) interrupt.
    pub package_name: &'a str,
    /// The owner's spec package.
    pub package: &'a Package,
    /// `interrupt` or `uninstall-interrupt`.
    pub stage: Stage,
    /// The merged interrupt.
    pub interrupt: &'a Interrupt,
    /// Node name.
    pub node: &'a str,
    /// `SKYHOOK_NODE_ORDER`.
    pub node_order: i64,
}

/// `<COPY_DIR_ROOT>/<nw>/<pkg>-<ver>-<nwUID>-<generation>` (§8.4).
pub fn copy_dir(settings: &Settings, owner: &Owner, package_name: &str, version: &str) -> String {
    format!(
        "{}/{}/{}-{}-{}-{}",
        settings.copy_dir_root, owner.name, package_name, version, owner.uid, owner.generation
    )
}

/// Stage timeout in whole seconds (§8.6): package `stageTimeout` or `JOB_STAGE_TIMEOUT`,
/// rounded up, clamped to `i32::MAX`; `None` when the timeout is zero.
pub fn stage_deadline_seconds(package: &Package, settings: &Settings) -> Option<i64> {
    let timeout = match package
        .stage_timeout
        .as_ref()
        .and_then(|d| parse_go_duration(&d.0).ok())
    {
        Some(d) => d.non_negative(),
        None => settings.job_stage_timeout(),
    };
    if timeout.is_zero() {
        return None;
    }
    let mut secs = timeout.as_secs();
    if timeout.subsec_nanos() > 0 {
        secs += 1;
    }
    Some((secs as i64).min(MAX_INT32))
}

/// The agent image of a package's work/check/interrupt containers.
pub fn agent_image<'a>(package: &'a Package, settings: &'a Settings) -> &'a str {
    package
        .agent_image_override
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or(&settings.agent_image)
}

fn truncated_name(name: &str) -> &str {
    // Package names are ASCII (admission pattern), so a byte cut is a char cut.
    if name.len() > 43 { &name[..43] } else { name }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The operator's env block, in the order of the §8.5 table (§16.3).
fn operator_env(
    settings: &Settings,
    owner: &Owner,
    package_name: &str,
    version: &str,
    node_order: i64,
) -> Vec<EnvVar> {
    vec![
        env(
            keys::env::SKYHOOK_LOG_DIR,
            format!("{}/{}", settings.agent_log_root, owner.name),
        ),
        env(
            keys::env::SKYHOOK_ROOT_DIR,
            format!("{}/{}", settings.copy_dir_root, owner.name),
        ),
        env(keys::env::COPY_RESOLV, "false"),
        env(
            keys::env::SKYHOOK_RESOURCE_ID,
            format!("{}_{}_{}", owner.resource_id(), package_name, version),
        ),
        env(keys::env::SKYHOOK_NODE_ORDER, node_order.to_string()),
    ]
}

fn privileged() -> Option<SecurityContext> {
    Some(SecurityContext {
        privileged: Some(true),
        ..SecurityContext::default()
    })
}

fn quantity_pair(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.to_string())),
        ("memory".to_string(), Quantity(memory.to_string())),
    ])
}

fn fixed_resources(cpu: &str, memory: &str) -> Option<ResourceRequirements> {
    Some(ResourceRequirements {
        requests: Some(quantity_pair(cpu, memory)),
        limits: Some(quantity_pair(cpu, memory)),
        ..ResourceRequirements::default()
    })
}

/// The package's resource override as container resources (§8.3), when all are set.
pub fn package_resources(package: &Package) -> Option<ResourceRequirements> {
    let r = package.resources.as_ref()?;
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    if let Some(q) = &r.cpu_request {
        requests.insert("cpu".to_string(), q.clone());
    }
    if let Some(q) = &r.memory_request {
        requests.insert("memory".to_string(), q.clone());
    }
    if let Some(q) = &r.cpu_limit {
        limits.insert("cpu".to_string(), q.clone());
    }
    if let Some(q) = &r.memory_limit {
        limits.insert("memory".to_string(), q.clone());
    }
    if requests.is_empty() && limits.is_empty() {
        return None;
    }
    Some(ResourceRequirements {
        requests: (!requests.is_empty()).then_some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..ResourceRequirements::default()
    })
}

fn root_mount() -> VolumeMount {
    VolumeMount {
        name: ROOT_MOUNT.to_string(),
        mount_path: ROOT_MOUNT_PATH.to_string(),
        mount_propagation: Some("HostToContainer".to_string()),
        ..VolumeMount::default()
    }
}

fn root_volume() -> Volume {
    Volume {
        name: ROOT_MOUNT.to_string(),
        host_path: Some(HostPathVolumeSource {
            path: "/".to_string(),
            type_: None,
        }),
        ..Volume::default()
    }
}

fn configmap_volume(volume: String, config_map: String) -> Volume {
    Volume {
        name: volume,
        config_map: Some(ConfigMapVolumeSource {
            name: config_map,
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// Mounts of a package Job init container: host root, node metadata, one `subPath` per
/// configMap key in key order (§8.4).
fn package_mounts(
    package_name: &str,
    package: &Package,
    metadata_volume: &str,
) -> Vec<VolumeMount> {
    let mut mounts = vec![
        root_mount(),
        VolumeMount {
            name: metadata_volume.to_string(),
            mount_path: format!("{PACKAGE_DIR}/node-metadata"),
            ..VolumeMount::default()
        },
    ];
    // BTreeMap iteration is already sorted by key.
    for key in package.config_map().keys() {
        mounts.push(VolumeMount {
            name: package_name.to_string(),
            mount_path: format!("{PACKAGE_DIR}/configmaps/{key}"),
            sub_path: Some(key.clone()),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    mounts
}

/// Pod tolerations in the order of §8.3.
pub fn pod_tolerations(nw: &NodeWright, settings: &Settings) -> Vec<Toleration> {
    let mut tolerations = vec![Toleration {
        key: Some(keys::TAINT_UNSCHEDULABLE.to_string()),
        operator: Some("Exists".to_string()),
        ..Toleration::default()
    }];
    let configured = settings.runtime_required_taint();
    let mut runtime = vec![configured.clone()];
    if let Ok(legacy) = crate::settings::parse_taint(keys::LEGACY_RUNTIME_REQUIRED_TAINT)
        && legacy.key != configured.key
    {
        runtime.push(legacy);
    }
    for taint in runtime {
        tolerations.push(Toleration {
            key: Some(taint.key),
            operator: Some("Equal".to_string()),
            value: taint.value,
            effect: Some(taint.effect),
            toleration_seconds: None,
        });
    }
    if let Some(extra) = &nw.spec.additional_tolerations {
        tolerations.extend(extra.iter().cloned());
    }
    for key in [keys::TAINT_NOT_READY, keys::TAINT_UNREACHABLE] {
        tolerations.push(Toleration {
            key: Some(key.to_string()),
            operator: Some("Exists".to_string()),
            effect: Some("NoExecute".to_string()),
            ..Toleration::default()
        });
    }
    tolerations
}

fn done_container(package: &Package) -> Container {
    Container {
        name: "done".to_string(),
        image: Some(package.pull_image()),
        command: Some(vec![SHELL.to_string()]),
        args: Some(vec!["-c".to_string(), "exit 0".to_string()]),
        resources: fixed_resources("100m", "20Mi"),
        security_context: privileged(),
        ..Container::default()
    }
}

fn labels(
    owner: &Owner,
    package_name: &str,
    version: &str,
    stage: Stage,
    node: &str,
    interrupt: bool,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (keys::JOB_LABEL_NAME.to_string(), owner.name.clone()),
        (
            keys::JOB_LABEL_PACKAGE.to_string(),
            package_label(package_name, version),
        ),
        (
            keys::JOB_LABEL_STAGE.to_string(),
            stage.as_str().to_string(),
        ),
        (
            keys::JOB_LABEL_NODE.to_string(),
            names::node_label_value(node),
        ),
        (
            keys::JOB_LABEL_GENERATION.to_string(),
            owner.generation.to_string(),
        ),
    ]);
    if interrupt {
        labels.insert(keys::JOB_LABEL_INTERRUPT.to_string(), "True".to_string());
    }
    labels
}

/// The `package` annotation a Job for this package and stage carries.
pub fn package_annotation(
    owner: &Owner,
    package_name: &str,
    package: &Package,
    stage: Stage,
) -> PackageAnnotation {
    PackageAnnotation {
        name: package_name.to_string(),
        version: package.version.clone(),
        skyhook: owner.name.clone(),
        stage: stage.as_str().to_string(),
        image: package.image.clone(),
        container_sha: package.container_sha.clone().unwrap_or_default(),
        invalid: false,
    }
}

/// Digest of everything about a package that makes a parked Job stale when edited (§16.3):
/// version, image, containerSHA, agent image, env, resources, stageTimeout and configMap.
pub fn package_digest(package: &Package, settings: &Settings) -> String {
    let material = DigestMaterial {
        version: &package.version,
        image: &package.image,
        container_sha: &package.container_sha,
        agent_image: agent_image(package, settings),
        env: &package.env,
        resources: &package.resources,
        stage_timeout: stage_deadline_seconds(package, settings),
        config_map: &package.config_map,
    };
    super::complete::sha256_hex(&serde_json::to_string(&material).unwrap_or_default())
}

/// What [`package_digest`] hashes, as JSON in this field order: Jobs already in a cluster
/// carry digests of exactly this text, so neither the order nor a name may change.
#[derive(Serialize)]
struct DigestMaterial<'a> {
    version: &'a str,
    image: &'a str,
    #[serde(rename = "containerSHA")]
    container_sha: &'a Option<String>,
    #[serde(rename = "agentImage")]
    agent_image: &'a str,
    env: &'a Option<Vec<EnvVar>>,
    resources: &'a Option<nodewright_schema::nodewright::ResourceRequirements>,
    #[serde(rename = "stageTimeout")]
    stage_timeout: Option<i64>,
    #[serde(rename = "configMap")]
    config_map: &'a Option<BTreeMap<String, String>>,
}

/// The package's configMap as the applied-config record of §16.3 (key → sha256 hex), compact.
pub fn config_record_json(package: &Package) -> String {
    serde_json::to_string(&super::complete::config_digests(package)).unwrap_or_default()
}

fn job_annotations(
    owner: &Owner,
    annotation: &PackageAnnotation,
    digest: String,
    configs: String,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            keys::JOB_ANNOTATION_RESOURCE_ID.to_string(),
            owner.resource_id(),
        ),
        (
            keys::JOB_ANNOTATION_PACKAGE.to_string(),
            annotation.to_json(),
        ),
        (keys::JOB_ANNOTATION_PACKAGE_DIGEST.to_string(), digest),
        (keys::JOB_ANNOTATION_CONFIG_DIGESTS.to_string(), configs),
    ])
}

/// What every Job of one package version of a NodeWright carries alike, whatever its node,
/// stage or kind: the package digest and configuration record (§16.3), and the pod's
/// tolerations and `done` container. Deriving them hashes the package, so a pass that starts
/// a stage on many nodes derives them once per package ([`PassCtx::package_jobs`]).
///
/// [`PassCtx::package_jobs`]: super::context::PassCtx::package_jobs
#[derive(Debug)]
pub struct PackageJobs {
    /// The NodeWright the Jobs belong to.
    owner: Owner,
    /// The package's name (its key in the spec).
    name: String,
    /// The package (its version as the Jobs run it) these parts were derived from.
    package: Package,
    digest: String,
    configs: String,
    tolerations: Vec<Toleration>,
    done: Container,
    /// The package's ConfigMap, when it has configuration data.
    configmap: Option<String>,
}

impl PackageJobs {
    /// The parts of the Jobs of `package`, named `name`, for NodeWright `nw`.
    pub fn of(nw: &NodeWright, settings: &Settings, name: &str, package: &Package) -> PackageJobs {
        PackageJobs {
            owner: Owner::of(nw),
            name: name.to_string(),
            package: package.clone(),
            digest: package_digest(package, settings),
            configs: config_record_json(package),
            tolerations: pod_tolerations(nw, settings),
            done: done_container(package),
            configmap: (!package.config_map().is_empty())
                .then(|| names::package_configmap(nw.name(), name, &package.version)),
        }
    }

    /// Whether these are the parts of `package`'s Jobs.
    pub fn is_of(&self, package: &Package) -> bool {
        self.package == *package
    }
}

/// A package's stage or interrupt Job on one node as a plan carries it until the executor
/// sends it: what sets it apart, and the parts every Job of the package shares. A pass that
/// starts a batch creates a Job on each of its nodes, and that many built Jobs (about 40 KB
/// each) would all stay alive until the last of them is written.
#[derive(Clone, Debug)]
pub struct PackageJob {
    settings: Arc<Settings>,
    parts: Arc<PackageJobs>,
    runs: Runs,
    node: String,
    node_order: i64,
    names: JobNames,
}

/// What a package Job runs.
#[derive(Clone, Debug)]
enum Runs {
    /// A stage of the package (never an interrupt stage).
    Stage(Stage),
    /// The node's merged interrupt, owned by the package (§8.16).
    Interrupt {
        /// `interrupt` or `uninstall-interrupt`.
        stage: Stage,
        /// The merged interrupt.
        interrupt: Interrupt,
    },
}

/// The hashed names a Job on a node carries (§8.1, §9.1), which the pass has derived already
/// for its own checks by the time it creates the Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobNames {
    /// The Job's name, its claim (§8.14): [`names::stage_job_name`] or
    /// [`names::interrupt_job_name`].
    pub job: String,
    /// The node's metadata ConfigMap, which the Job's pod mounts
    /// ([`names::node_metadata_configmap`]).
    pub metadata_configmap: String,
}

impl PackageJob {
    /// The stage Job of the package `parts` describe, on `node` (§8.2–§8.5).
    pub fn stage(
        settings: Arc<Settings>,
        parts: Arc<PackageJobs>,
        stage: Stage,
        (node, node_order): (&str, i64),
        names: JobNames,
    ) -> PackageJob {
        debug_assert_eq!(names, stage_job_names(&parts, stage, node));
        PackageJob {
            settings,
            parts,
            runs: Runs::Stage(stage),
            node: node.to_string(),
            node_order,
            names,
        }
    }

    /// The interrupt Job of `node`, owned by the package `parts` describe (§8.16).
    pub fn interrupt(
        settings: Arc<Settings>,
        parts: Arc<PackageJobs>,
        (stage, interrupt): (Stage, &Interrupt),
        (node, node_order): (&str, i64),
        names: JobNames,
    ) -> PackageJob {
        debug_assert_eq!(names, interrupt_job_names(&parts, stage, interrupt, node));
        PackageJob {
            settings,
            parts,
            runs: Runs::Interrupt {
                stage,
                interrupt: interrupt.clone(),
            },
            node: node.to_string(),
            node_order,
            names,
        }
    }

    /// The Job's name.
    pub fn name(&self) -> &str {
        &self.names.job
    }

    /// The node the Job runs on.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whether this is an interrupt Job.
    pub fn is_interrupt(&self) -> bool {
        matches!(self.runs, Runs::Interrupt { .. })
    }

    /// The ConfigMaps the Job's pod mounts: the node's metadata, and for a stage the
    /// package's configuration when it has some.
    pub fn config_maps(&self) -> impl Iterator<Item = &str> {
        let package = match self.runs {
            Runs::Stage(_) => self.parts.configmap.as_deref(),
            Runs::Interrupt { .. } => None,
        };
        std::iter::once(self.names.metadata_configmap.as_str()).chain(package)
    }

    /// The Job itself.
    pub fn build(&self) -> Job {
        let on = (self.node.as_str(), self.node_order);
        match &self.runs {
            Runs::Stage(stage) => {
                stage_job(&self.settings, &self.parts, self.names.clone(), *stage, on)
            }
            Runs::Interrupt { stage, interrupt } => interrupt_job(
                &self.settings,
                &self.parts,
                self.names.clone(),
                (*stage, interrupt),
                on,
            ),
        }
    }
}

fn stage_job_names(parts: &PackageJobs, stage: Stage, node: &str) -> JobNames {
    JobNames {
        job: names::stage_job_name(
            &parts.owner.name,
            &parts.name,
            &parts.package.version,
            stage.as_str(),
            node,
        ),
        metadata_configmap: names::node_metadata_configmap(&parts.owner.name, node),
    }
}

fn interrupt_job_names(
    parts: &PackageJobs,
    stage: Stage,
    interrupt: &Interrupt,
    node: &str,
) -> JobNames {
    JobNames {
        job: names::interrupt_job_name(
            &parts.owner.name,
            stage.as_str(),
            interrupt.kind.as_str(),
            node,
        ),
        metadata_configmap: names::node_metadata_configmap(&parts.owner.name, node),
    }
}

/// Builds the stage Job of a package on a node (§8.2–§8.5).
pub fn build_stage_job(nw: &NodeWright, settings: &Settings, input: StageJobInput<'_>) -> Job {
    let parts = PackageJobs::of(nw, settings, input.package_name, input.package);
    let names = stage_job_names(&parts, input.stage, input.node);
    stage_job(
        settings,
        &parts,
        names,
        input.stage,
        (input.node, input.node_order),
    )
}

fn stage_job(
    settings: &Settings,
    shared: &PackageJobs,
    named: JobNames,
    stage: Stage,
    (node, node_order): (&str, i64),
) -> Job {
    let owner = &shared.owner;
    let package_name = shared.name.as_str();
    let package = &shared.package;
    let version = package.version.as_str();
    let copy_dir = copy_dir(settings, owner, package_name, version);
    let short = truncated_name(package_name);
    let metadata_volume = names::node_metadata_volume(node);
    let mounts = package_mounts(package_name, package, &metadata_volume);
    let resources = package_resources(package);
    let agent = agent_image(package, settings).to_string();

    let mut work_env: Vec<EnvVar> = package.env.clone().unwrap_or_default();
    work_env.extend(operator_env(
        settings,
        owner,
        package_name,
        version,
        node_order,
    ));

    let init_copy = Container {
        name: format!("{short}-init"),
        image: Some(package.pull_image()),
        image_pull_policy: Some("Always".to_string()),
        command: Some(vec![SHELL.to_string()]),
        args: Some(vec![
            "-c".to_string(),
            "mkdir -p /root/${SKYHOOK_DIR} && cp -r /skyhook-package/* /root/${SKYHOOK_DIR}"
                .to_string(),
        ]),
        env: Some(vec![env(keys::env::SKYHOOK_DIR, copy_dir.clone())]),
        volume_mounts: Some(mounts.clone()),
        resources: resources.clone(),
        security_context: privileged(),
        ..Container::default()
    };
    let agent_container = |name: String, mode: String| Container {
        name,
        image: Some(agent.clone()),
        image_pull_policy: Some("Always".to_string()),
        args: Some(vec![mode, ROOT_MOUNT_PATH.to_string(), copy_dir.clone()]),
        env: Some(work_env.clone()),
        volume_mounts: Some(mounts.clone()),
        resources: resources.clone(),
        security_context: privileged(),
        ..Container::default()
    };
    let work = agent_container(format!("{short}-{stage}"), stage.as_str().to_string());
    let check = agent_container(format!("{short}-{stage}check"), format!("{stage}-check"));

    let mut volumes = vec![
        root_volume(),
        configmap_volume(metadata_volume, named.metadata_configmap),
    ];
    if let Some(configmap) = &shared.configmap {
        volumes.push(configmap_volume(
            package_name.to_string(),
            configmap.clone(),
        ));
    }

    let annotation = package_annotation(owner, package_name, package, stage);
    let labels = labels(owner, package_name, version, stage, node, false);
    let grace = package
        .graceful_shutdown
        .as_ref()
        .and_then(|d| parse_go_duration(&d.0).ok())
        .map(|d| d.non_negative().as_secs() as i64);

    let pod_spec = PodSpec {
        node_name: Some(node.to_string()),
        host_pid: Some(true),
        host_network: Some(true),
        restart_policy: Some("Never".to_string()),
        active_deadline_seconds: stage_deadline_seconds(package, settings),
        termination_grace_period_seconds: grace,
        image_pull_secrets: pull_secrets(settings),
        tolerations: Some(shared.tolerations.clone()),
        init_containers: Some(vec![init_copy, work, check]),
        containers: vec![shared.done.clone()],
        volumes: Some(volumes),
        ..PodSpec::default()
    };

    Job {
        metadata: ObjectMeta {
            name: Some(named.job),
            namespace: Some(settings.namespace.clone()),
            labels: Some(labels.clone()),
            annotations: Some(job_annotations(
                owner,
                &annotation,
                shared.digest.clone(),
                shared.configs.clone(),
            )),
            owner_references: Some(vec![owner.owner_reference()]),
            ..ObjectMeta::default()
        },
        spec: Some(Arc::new(JobSpec {
            parallelism: Some(1),
            completions: Some(1),
            backoff_limit: Some(settings.job_backoff_limit),
            pod_replacement_policy: Some("Failed".to_string()),
            pod_failure_policy: Some(PodFailurePolicy {
                rules: vec![PodFailurePolicyRule {
                    action: "Ignore".to_string(),
                    on_exit_codes: None,
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".to_string(),
                        status: "True".to_string(),
                    }]),
                }],
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: Some(BTreeMap::from([(
                        keys::JOB_ANNOTATION_PACKAGE.to_string(),
                        annotation.to_json(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec),
            },
            ..JobSpec::default()
        })),
        status: None,
    }
}

fn pull_secrets(settings: &Settings) -> Option<Vec<LocalObjectReference>> {
    (!settings.image_pull_secret.is_empty()).then(|| {
        vec![LocalObjectReference {
            name: settings.image_pull_secret.clone(),
        }]
    })
}

/// The interrupt as the agent reads it: JSON with the wire type name, standard base64 (§1.6).
pub fn encode_interrupt(interrupt: &Interrupt) -> String {
    let mut object = serde_json::Map::new();
    object.insert(
        "type".to_string(),
        serde_json::Value::String(interrupt.kind.agent_wire_name().to_string()),
    );
    if !interrupt.services.is_empty() {
        object.insert(
            "services".to_string(),
            serde_json::Value::Array(
                interrupt
                    .services
                    .iter()
                    .map(|s| serde_json::Value::String(s.clone()))
                    .collect(),
            ),
        );
    }
    let json = serde_json::Value::Object(object).to_string();
    base64::engine::general_purpose::STANDARD.encode(json)
}

/// Builds the interrupt Job of a node (§8.16).
pub fn build_interrupt_job(
    nw: &NodeWright,
    settings: &Settings,
    input: InterruptJobInput<'_>,
) -> Job {
    let parts = PackageJobs::of(nw, settings, input.package_name, input.package);
    let names = interrupt_job_names(&parts, input.stage, input.interrupt, input.node);
    interrupt_job(
        settings,
        &parts,
        names,
        (input.stage, input.interrupt),
        (input.node, input.node_order),
    )
}

fn interrupt_job(
    settings: &Settings,
    shared: &PackageJobs,
    named: JobNames,
    (stage, interrupt): (Stage, &Interrupt),
    (node, node_order): (&str, i64),
) -> Job {
    let owner = &shared.owner;
    let package_name = shared.name.as_str();
    let package = &shared.package;
    let version = package.version.as_str();
    let copy_dir = copy_dir(settings, owner, package_name, version);
    let container = Container {
        name: "interrupt".to_string(),
        image: Some(agent_image(package, settings).to_string()),
        image_pull_policy: Some("Always".to_string()),
        args: Some(vec![
            "interrupt".to_string(),
            ROOT_MOUNT_PATH.to_string(),
            copy_dir,
            encode_interrupt(interrupt),
        ]),
        env: Some(operator_env(
            settings,
            owner,
            package_name,
            version,
            node_order,
        )),
        volume_mounts: Some(vec![root_mount()]),
        resources: fixed_resources("500m", "256Mi"),
        security_context: privileged(),
        ..Container::default()
    };
    let annotation = package_annotation(owner, package_name, package, stage);
    let labels = labels(owner, package_name, version, stage, node, true);
    let pod_spec = PodSpec {
        node_name: Some(node.to_string()),
        host_pid: Some(true),
        host_network: Some(true),
        restart_policy: Some("OnFailure".to_string()),
        image_pull_secrets: pull_secrets(settings),
        tolerations: Some(shared.tolerations.clone()),
        init_containers: Some(vec![container]),
        containers: vec![shared.done.clone()],
        volumes: Some(vec![
            root_volume(),
            configmap_volume(
                names::interrupt_node_metadata_volume(&owner.name, node),
                named.metadata_configmap,
            ),
        ]),
        ..PodSpec::default()
    };
    Job {
        metadata: ObjectMeta {
            name: Some(named.job),
            namespace: Some(settings.namespace.clone()),
            labels: Some(labels.clone()),
            annotations: Some(job_annotations(
                owner,
                &annotation,
                shared.digest.clone(),
                shared.configs.clone(),
            )),
            owner_references: Some(vec![owner.owner_reference()]),
            ..ObjectMeta::default()
        },
        spec: Some(Arc::new(JobSpec {
            parallelism: Some(1),
            completions: Some(1),
            backoff_limit: Some(i32::MAX),
            pod_replacement_policy: Some("Failed".to_string()),
            active_deadline_seconds: stage_deadline_seconds(package, settings),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: Some(BTreeMap::from([(
                        keys::JOB_ANNOTATION_PACKAGE.to_string(),
                        annotation.to_json(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec),
            },
            ..JobSpec::default()
        })),
        status: None,
    }
}

// ---- Reading Jobs back ----

/// What the lifecycle reads from a Job's own labels, annotations and conditions, read once:
/// handlers, the sweep and pause/resume each consult these several times per Job and pass,
/// and every one is a string lookup in the Job's maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobFacts<'a> {
    /// The NodeWright `name` label.
    pub nodewright: Option<&'a str>,
    /// The `node` label (`names::node_label_value` of the node's name).
    pub node_label: Option<&'a str>,
    /// The stage it runs ([`job_stage`]).
    pub stage: Option<Stage>,
    /// An interrupt Job ([`is_interrupt_job`]).
    pub interrupt: bool,
    /// Carries the `state-recorded` marker ([`is_processed`]).
    pub processed: bool,
    /// `Complete` is `True`.
    pub complete: bool,
    /// `Failed` is `True`.
    pub failed: bool,
    /// `FailureTarget` is `True` (§8.9): the Job controller decided the Job fails.
    pub failure_target: bool,
}

impl<'a> JobFacts<'a> {
    /// Reads the facts of `job`.
    pub fn of(job: &'a Job) -> JobFacts<'a> {
        JobFacts {
            nodewright: None,
            node_label: None,
            stage: job_stage(job),
            interrupt: is_interrupt_job(job),
            processed: is_processed(job),
            complete: is_complete(job),
            failed: is_failed(job),
            failure_target: has_condition(job, "FailureTarget"),
        }
        .labelled(job)
    }

    /// These facts without the two label strings: what a cache keeps per Job version
    /// (the strings borrow from the Job; [`JobFacts::labelled`] reads them again).
    pub fn unlabelled(&self) -> JobFacts<'static> {
        JobFacts {
            nodewright: None,
            node_label: None,
            ..*self
        }
    }

    /// Facts of `job` known but for its labels (from [`JobFacts::unlabelled`] of the same
    /// Job version), with the labels read from `job`.
    pub fn labelled(self, job: &'a Job) -> JobFacts<'a> {
        JobFacts {
            nodewright: label(job, keys::JOB_LABEL_NAME),
            node_label: label(job, keys::JOB_LABEL_NODE),
            ..self
        }
    }

    /// Neither `Complete` nor `Failed` ([`is_unfinished`]).
    pub fn unfinished(&self) -> bool {
        !self.complete && !self.failed
    }
}

/// A Job condition type with status `True`.
pub fn has_condition(job: &Job, kind: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

/// The reason of a `True` condition of that type.
pub fn condition_reason<'a>(job: &'a Job, kind: &str) -> Option<&'a str> {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind && c.status == "True"))
        .and_then(|c| c.reason.as_deref())
}

/// `Complete`.
pub fn is_complete(job: &Job) -> bool {
    has_condition(job, "Complete")
}

/// `Failed`.
pub fn is_failed(job: &Job) -> bool {
    has_condition(job, "Failed")
}

/// Finished = `Complete` or `Failed`, the Job controller's terminal conditions.
pub fn is_finished(job: &Job) -> bool {
    is_complete(job) || is_failed(job)
}

/// Unfinished = neither `Complete` nor `Failed` (a suspended Job is unfinished, §0.1).
pub fn is_unfinished(job: &Job) -> bool {
    !is_finished(job)
}

/// Whether the Job carries the `state-recorded` marker (§8.8).
pub fn is_processed(job: &Job) -> bool {
    annotation(job, keys::JOB_ANNOTATION_STATE_RECORDED) == Some("true")
}

/// Whether `spec.suspend` is set.
pub fn is_suspended(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false)
}

/// An annotation of the Job.
pub fn annotation<'a>(job: &'a Job, key: &str) -> Option<&'a str> {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// A label of the Job.
pub fn label<'a>(job: &'a Job, key: &str) -> Option<&'a str> {
    job.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// A Job's `package` label value: the package and its version, `<name>-<version>`.
pub fn package_label(name: &str, version: &str) -> String {
    format!("{name}-{version}")
}

/// The Job's name.
pub fn job_name(job: &Job) -> &str {
    job.metadata.name.as_deref().unwrap_or_default()
}

/// The Job's version: its uid and resourceVersion, `None` without either. The API server (and
/// the simulator) moves the resourceVersion on every write, so what is read from one version
/// holds for that version; memos across passes key on it.
pub fn job_version(job: &Job) -> Option<(&str, &str)> {
    let m = &job.metadata;
    m.uid.as_deref().zip(m.resource_version.as_deref())
}

/// The parsed `package` annotation. A pass reads it through
/// [`super::context::PassCtx::package_annotation`], which parses each Job once.
pub fn read_package_annotation(job: &Job) -> Option<PackageAnnotation> {
    package_annotation_raw(job).and_then(parse_package_annotation)
}

/// The raw `package` annotation of a Job (§4.7).
pub fn package_annotation_raw(job: &Job) -> Option<&str> {
    annotation(job, keys::JOB_ANNOTATION_PACKAGE)
}

/// Parses a `package` annotation value; `None` when it does not parse.
pub fn parse_package_annotation(raw: &str) -> Option<PackageAnnotation> {
    serde_json::from_str(raw).ok()
}

/// The stage a Job runs (its `stage` label).
pub fn job_stage(job: &Job) -> Option<Stage> {
    label(job, keys::JOB_LABEL_STAGE).and_then(|s| s.parse().ok())
}

/// Whether it is an interrupt Job (`interrupt` label).
pub fn is_interrupt_job(job: &Job) -> bool {
    label(job, keys::JOB_LABEL_INTERRUPT) == Some("True")
}

/// Whether a Job belongs to this NodeWright and runs on this node.
pub fn is_on(job: &Job, nw: &str, node: &str) -> bool {
    label(job, keys::JOB_LABEL_NAME) == Some(nw)
        && label(job, keys::JOB_LABEL_NODE) == Some(names::node_label_value(node).as_str())
}

/// `status.failed` (the failed-attempt count).
pub fn failed_count(job: &Job) -> i32 {
    job.status.as_ref().and_then(|s| s.failed).unwrap_or(0)
}

/// Staleness (§8.14): does `existing` still match what would be built now, as `expected`
/// names it? Compares the `package` label, the template kind (interrupt or not), the init
/// containers' names, images, env (minus the operator's run-specific variables) and — stage
/// Jobs only — resources. Args, deadlines, backoff, tolerations and the interrupt object are
/// not compared. It reads nothing of the expected Job but its [`MatchTarget`], so an answer
/// remembered per Job version and target cannot miss an input.
pub fn job_matches(existing: &Job, expected: &MatchTarget) -> bool {
    if label(existing, keys::JOB_LABEL_PACKAGE) != expected.package.as_deref() {
        return false;
    }
    if is_interrupt_job(existing) != expected.interrupt {
        return false;
    }
    let limit_ranged = existing
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .is_some_and(|a| a.contains_key(keys::LIMIT_RANGER_ANNOTATION));
    let have = existing
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.init_containers.as_deref())
        .unwrap_or_default();
    if have.len() != expected.inits.len() {
        return false;
    }
    have.iter().zip(&expected.inits).all(|(h, w)| {
        h.name == w.name
            && h.image == w.image
            && compared_env(h).eq(w.env.iter())
            && (expected.interrupt || resources_match(h, w.resources.as_ref(), limit_ranged))
    })
}

/// What [`job_matches`] compares an existing Job against, taken from the Job that would be
/// built now: its `package` label, its kind and, per init container, the name, image,
/// compared env and (stage Jobs only) resources. Expected Jobs with equal targets give every
/// existing Job the same answer.
#[derive(Clone, Debug, PartialEq)]
pub struct MatchTarget {
    package: Option<String>,
    interrupt: bool,
    inits: Vec<ComparedInit>,
}

/// The compared parts of one init container of an expected Job.
#[derive(Clone, Debug, PartialEq)]
struct ComparedInit {
    name: String,
    image: Option<String>,
    env: Vec<EnvVar>,
    /// Stage Jobs only (interrupt Jobs' resources are not compared).
    resources: Option<ResourceRequirements>,
}

impl MatchTarget {
    /// The target of an expected Job.
    pub fn of(expected: &Job) -> MatchTarget {
        let interrupt = is_interrupt_job(expected);
        let inits = expected
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.init_containers.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|c| ComparedInit {
                name: c.name.clone(),
                image: c.image.clone(),
                env: compared_env(c).cloned().collect(),
                resources: c.resources.clone().filter(|_| !interrupt),
            })
            .collect();
        MatchTarget {
            package: label(expected, keys::JOB_LABEL_PACKAGE).map(str::to_string),
            interrupt,
            inits,
        }
    }
}

/// A container's variables that staleness compares: all but the run-specific ones (§8.14).
pub fn compared_env(container: &Container) -> impl Iterator<Item = &EnvVar> {
    container
        .env
        .iter()
        .flatten()
        .filter(|e| !keys::env::STALENESS_IGNORED.contains(&e.name.as_str()))
}

fn resources_match(
    have: &Container,
    want: Option<&ResourceRequirements>,
    limit_ranged: bool,
) -> bool {
    match want {
        Some(w) => have.resources.as_ref().is_some_and(|h| {
            quantities_equal(h.requests.as_ref(), w.requests.as_ref())
                && quantities_equal(h.limits.as_ref(), w.limits.as_ref())
        }),
        None => {
            limit_ranged
                || have.resources.as_ref().is_none_or(|h| {
                    h.requests.as_ref().is_none_or(BTreeMap::is_empty)
                        && h.limits.as_ref().is_none_or(BTreeMap::is_empty)
                })
        }
    }
}

fn quantities_equal(
    a: Option<&BTreeMap<String, Quantity>>,
    b: Option<&BTreeMap<String, Quantity>>,
) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter()
            .all(|(k, q)| b.get(k).is_some_and(|other| quantity_eq(&q.0, &other.0)))
}

/// Semantic quantity equality (`1` == `1000m`, `1Gi` == `1024Mi`); unparsable values compare
/// as text.
fn quantity_eq(a: &str, b: &str) -> bool {
    use nodewright_schema::quantity::Quantity as Q;
    match (Q::parse(a), Q::parse(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Whether a Job's recorded package differs from the spec package now (§16.3: a package edit
/// re-attempts a parked stage). Jobs built before the digest existed count as matching.
pub fn package_edited(job: &Job, package: &Package, settings: &Settings) -> bool {
    match annotation(job, keys::JOB_ANNOTATION_PACKAGE_DIGEST) {
        Some(recorded) => recorded != package_digest(package, settings),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_schema::InterruptType;
    use nodewright_schema::duration::GoDuration;
    use nodewright_schema::nodewright::ResourceRequirements as PkgResources;

    fn nodewright() -> NodeWright {
        let mut nw = NodeWright::new("gpu-init", Default::default());
        nw.metadata.uid = Some("uid-1".into());
        nw.metadata.generation = Some(3);
        nw
    }

    fn tuning() -> Package {
        Package {
            version: "1.2.3".into(),
            image: "ghcr.io/nvidia/skyhook-packages/tuning".into(),
            config_map: Some(BTreeMap::from([
                ("b.conf".into(), "B".into()),
                ("a.conf".into(), "A".into()),
            ])),
            env: Some(vec![env("FOO", "bar")]),
            ..Package::default()
        }
    }

    fn stage_job(stage: Stage, package: &Package) -> Job {
        build_stage_job(
            &nodewright(),
            &Settings::default(),
            StageJobInput {
                package_name: "tuning",
                package,
                stage,
                node: "node-a",
                node_order: 2,
            },
        )
    }

    fn pod(job: &Job) -> &PodSpec {
        job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
    }

    #[test]
    fn package_annotation_is_byte_exact() {
        let a = PackageAnnotation {
            name: "dax".into(),
            version: "1.2.3".into(),
            skyhook: "interrupt-grouping".into(),
            stage: "apply".into(),
            image: "ghcr.io/nvidia/skyhook/agentless".into(),
            container_sha: String::new(),
            invalid: false,
        };
        assert_eq!(
            a.to_json(),
            r#"{"name":"dax","version":"1.2.3","skyhook":"interrupt-grouping","stage":"apply","image":"ghcr.io/nvidia/skyhook/agentless"}"#
        );
        let b = PackageAnnotation {
            container_sha: "sha256:ab".into(),
            invalid: true,
            ..a
        };
        assert!(
            b.to_json()
                .ends_with(r#""containerSHA":"sha256:ab","invalid":true}"#)
        );
    }

    #[test]
    fn stage_job_has_the_name_labels_and_spec_of_section_8() {
        let job = stage_job(Stage::Config, &tuning());
        assert_eq!(
            job.metadata.name.as_deref(),
            Some("gpu-init-tuning-1-2-3-config-node-a-f8704da8")
        );
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[keys::JOB_LABEL_PACKAGE], "tuning-1.2.3");
        assert_eq!(labels[keys::JOB_LABEL_GENERATION], "3");
        assert!(!labels.contains_key(keys::JOB_LABEL_INTERRUPT));
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.backoff_limit, Some(3));
        assert_eq!(spec.active_deadline_seconds, None);
        assert_eq!(spec.pod_replacement_policy.as_deref(), Some("Failed"));
        let p = pod(&job);
        assert_eq!(p.active_deadline_seconds, Some(3600));
        assert_eq!(p.restart_policy.as_deref(), Some("Never"));
        let names: Vec<_> = p
            .init_containers
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            names,
            ["tuning-init", "tuning-config", "tuning-configcheck"]
        );
        let check = &p.init_containers.as_ref().unwrap()[2];
        assert_eq!(
            check.args.as_ref().unwrap(),
            &[
                "config-check",
                "/root",
                "/var/lib/skyhook/gpu-init/tuning-1.2.3-uid-1-3"
            ]
        );
        let env: Vec<_> = check
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(
            env,
            [
                "FOO",
                "SKYHOOK_LOG_DIR",
                "SKYHOOK_ROOT_DIR",
                "COPY_RESOLV",
                "SKYHOOK_RESOURCE_ID",
                "SKYHOOK_NODE_ORDER"
            ]
        );
        let mounts: Vec<_> = check
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(
            mounts,
            [
                "/root",
                "/skyhook-package/node-metadata",
                "/skyhook-package/configmaps/a.conf",
                "/skyhook-package/configmaps/b.conf"
            ]
        );
        let tolerations: Vec<_> = p
            .tolerations
            .as_ref()
            .unwrap()
            .iter()
            .map(|t| t.key.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            tolerations,
            [
                "node.kubernetes.io/unschedulable",
                "nodewright.nvidia.com",
                "skyhook.nvidia.com",
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable"
            ]
        );
        assert!(
            p.tolerations
                .as_ref()
                .unwrap()
                .iter()
                .all(|t| t.toleration_seconds.is_none())
        );
    }

    #[test]
    fn deadline_rounds_up_and_zero_omits_it() {
        let mut p = tuning();
        p.stage_timeout = Some(GoDuration::new("500ms"));
        assert_eq!(stage_deadline_seconds(&p, &Settings::default()), Some(1));
        p.stage_timeout = Some(GoDuration::new("0s"));
        assert_eq!(stage_deadline_seconds(&p, &Settings::default()), None);
        p.stage_timeout = Some(GoDuration::new("1000000h"));
        assert_eq!(
            stage_deadline_seconds(&p, &Settings::default()),
            Some(i32::MAX as i64)
        );
    }

    #[test]
    fn long_package_names_are_cut_to_43_in_container_names() {
        let name = "a".repeat(50);
        let job = build_stage_job(
            &nodewright(),
            &Settings::default(),
            StageJobInput {
                package_name: &name,
                package: &tuning(),
                stage: Stage::Apply,
                node: "n",
                node_order: 0,
            },
        );
        assert_eq!(
            pod(&job).init_containers.as_ref().unwrap()[0].name,
            format!("{}-init", "a".repeat(43))
        );
    }

    #[test]
    fn interrupt_job_runs_one_container_with_the_encoded_interrupt() {
        let interrupt = Interrupt {
            kind: InterruptType::Service,
            services: vec!["containerd".into(), "kubelet".into()],
        };
        let job = build_interrupt_job(
            &nodewright(),
            &Settings::default(),
            InterruptJobInput {
                package_name: "tuning",
                package: &tuning(),
                stage: Stage::Interrupt,
                interrupt: &interrupt,
                node: "node-a",
                node_order: 0,
            },
        );
        assert_eq!(
            job.metadata.name.as_deref().unwrap(),
            names::safe_name(63, &["gpu-init", "interrupt", "service", "node-a"])
        );
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.backoff_limit, Some(i32::MAX));
        assert_eq!(spec.active_deadline_seconds, Some(3600));
        assert!(spec.pod_failure_policy.is_none());
        let p = pod(&job);
        assert_eq!(p.restart_policy.as_deref(), Some("OnFailure"));
        assert_eq!(p.active_deadline_seconds, None);
        let c = &p.init_containers.as_ref().unwrap()[0];
        let args = c.args.as_ref().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(&args[3])
            .unwrap();
        assert_eq!(
            String::from_utf8(decoded).unwrap(),
            r#"{"type":"service_restart","services":["containerd","kubelet"]}"#
        );
        assert_eq!(c.env.as_ref().unwrap().len(), 5);
        assert_eq!(c.volume_mounts.as_ref().unwrap().len(), 1);
        assert_eq!(
            job.metadata.labels.as_ref().unwrap()[keys::JOB_LABEL_INTERRUPT],
            "True"
        );
    }

    #[test]
    fn a_package_digest_is_the_hash_of_the_same_json_text_as_ever() {
        let package: Package = serde_yaml::from_str(
            "version: 1.2.3\nimage: example/p\ncontainerSHA: sha256:abc\n\
             env: [{name: A, value: b}]\nresources: {cpuLimit: 500m, memoryLimit: 1Gi}\n\
             stageTimeout: 10m\nconfigMap: {z.conf: z, a.conf: a}",
        )
        .expect("the package is valid YAML");
        let settings = Settings::default();
        // The text Jobs in clusters were stamped with: keys in this order, nested objects as
        // their types serialize them.
        let text = serde_json::json!({
            "version": package.version,
            "image": package.image,
            "containerSHA": package.container_sha,
            "agentImage": agent_image(&package, &settings),
            "env": package.env,
            "resources": package.resources,
            "stageTimeout": stage_deadline_seconds(&package, &settings),
            "configMap": package.config_map,
        })
        .to_string();
        assert!(text.contains("\"stageTimeout\":600"), "{text}");
        assert_eq!(
            package_digest(&package, &settings),
            crate::engine::complete::sha256_hex(&text)
        );
    }

    #[test]
    fn staleness_ignores_run_specific_env_but_sees_package_edits() {
        let base = tuning();
        let job = stage_job(Stage::Apply, &base);
        let mut other_order = job.clone();
        if let Some(spec) = other_order.spec.as_mut().map(Arc::make_mut) {
            for c in spec
                .template
                .spec
                .as_mut()
                .unwrap()
                .init_containers
                .as_mut()
                .unwrap()
            {
                for e in c.env.iter_mut().flatten() {
                    if e.name == keys::env::SKYHOOK_NODE_ORDER {
                        e.value = Some("9".into());
                    }
                }
            }
        }
        assert!(job_matches(&other_order, &MatchTarget::of(&job)));
        let mut edited = base.clone();
        edited.env = Some(vec![env("FOO", "baz")]);
        assert!(!job_matches(
            &job,
            &MatchTarget::of(&stage_job(Stage::Apply, &edited))
        ));
        edited = base.clone();
        edited.resources = Some(PkgResources {
            cpu_request: Some(Quantity("1".into())),
            cpu_limit: Some(Quantity("1".into())),
            memory_request: Some(Quantity("1Gi".into())),
            memory_limit: Some(Quantity("1Gi".into())),
        });
        let with_resources = stage_job(Stage::Apply, &edited);
        assert!(!job_matches(&job, &MatchTarget::of(&with_resources)));
        let mut same = edited.clone();
        same.resources.as_mut().unwrap().cpu_limit = Some(Quantity("1000m".into()));
        same.resources.as_mut().unwrap().memory_limit = Some(Quantity("1024Mi".into()));
        assert!(job_matches(
            &with_resources,
            &MatchTarget::of(&stage_job(Stage::Apply, &same))
        ));
        assert!(package_edited(&job, &edited, &Settings::default()));
        assert!(!package_edited(&job, &base, &Settings::default()));
    }

    #[test]
    fn a_package_job_as_a_plan_carries_it_is_the_job_built_alone() {
        use crate::plan::NewJob;
        let (nw, package, settings) = (rich_nodewright(), rich_package(), Settings::default());
        assert!(
            !package.config_map().is_empty(),
            "the stage Job mounts the package's data"
        );
        let shared = Arc::new(PackageJobs::of(&nw, &settings, "tuning", &package));
        let carried_settings = Arc::new(settings.clone());
        let interrupt = Interrupt {
            kind: InterruptType::Reboot,
            services: vec!["kubelet".into()],
        };
        let long_node = "n".repeat(70);
        // One set of shared parts serves every node of the package.
        for node in ["node-a", "node-b", long_node.as_str()] {
            let stage = StageJobInput {
                package_name: "tuning",
                package: &package,
                stage: Stage::Config,
                node,
                node_order: 2,
            };
            let interrupt_input = InterruptJobInput {
                package_name: "tuning",
                package: &package,
                stage: Stage::Interrupt,
                interrupt: &interrupt,
                node,
                node_order: 2,
            };
            let pairs = [
                (
                    PackageJob::stage(
                        Arc::clone(&carried_settings),
                        Arc::clone(&shared),
                        Stage::Config,
                        (node, 2),
                        JobNames {
                            job: names::stage_job_name(
                                "gpu-init", "tuning", "1.2.3", "config", node,
                            ),
                            metadata_configmap: names::node_metadata_configmap("gpu-init", node),
                        },
                    ),
                    build_stage_job(&nw, &settings, stage),
                ),
                (
                    PackageJob::interrupt(
                        Arc::clone(&carried_settings),
                        Arc::clone(&shared),
                        (Stage::Interrupt, &interrupt),
                        (node, 2),
                        JobNames {
                            job: names::interrupt_job_name("gpu-init", "interrupt", "reboot", node),
                            metadata_configmap: names::node_metadata_configmap("gpu-init", node),
                        },
                    ),
                    build_interrupt_job(&nw, &settings, interrupt_input),
                ),
            ];
            for (carried, alone) in pairs {
                let mounted: Vec<&str> = (alone.spec.as_ref())
                    .and_then(|s| s.template.spec.as_ref())
                    .and_then(|s| s.volumes.as_ref())
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.config_map.as_ref().map(|c| c.name.as_str()))
                    .collect();
                assert_eq!(carried.config_maps().collect::<Vec<_>>(), mounted);
                let (carried, alone) = (NewJob::from(carried), NewJob::from(alone.clone()));
                assert_eq!(carried.job(), alone.job());
                assert_eq!(carried.name(), alone.name());
                assert_eq!(carried.is_interrupt(), alone.is_interrupt());
                assert_eq!(carried.node_label(), alone.node_label());
            }
        }
        let mut other_version = package.clone();
        other_version.version = "9.9.9".into();
        assert!(shared.is_of(&package));
        assert!(!shared.is_of(&other_version), "a digest names its version");
    }

    #[test]
    fn quantities_compare_semantically() {
        assert!(quantity_eq("1", "1000m"));
        assert!(quantity_eq("1Gi", "1024Mi"));
        assert!(!quantity_eq("1G", "1Gi"));
    }

    /// A NodeWright exercising every input of the Job shape.
    fn rich_nodewright() -> NodeWright {
        let mut nw = nodewright();
        nw.spec.additional_tolerations = Some(vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("gpu".into()),
            effect: Some("NoSchedule".into()),
            toleration_seconds: None,
        }]);
        nw
    }

    fn rich_package() -> Package {
        let mut p = tuning();
        p.container_sha = Some(format!("sha256:{}", "a".repeat(64)));
        p.agent_image_override = Some("example/agent:v9.9.9".into());
        p.graceful_shutdown = Some(GoDuration::new("45s"));
        p.stage_timeout = Some(GoDuration::new("90m"));
        p.resources = Some(PkgResources {
            cpu_request: Some(Quantity("500m".into())),
            cpu_limit: Some(Quantity("1".into())),
            memory_request: Some(Quantity("256Mi".into())),
            memory_limit: Some(Quantity("512Mi".into())),
        });
        p.interrupt = Some(Interrupt {
            kind: InterruptType::Reboot,
            services: vec![],
        });
        p
    }

    fn golden_settings() -> Settings {
        Settings {
            image_pull_secret: "regcred".into(),
            ..Settings::default()
        }
    }

    fn golden_stage(stage: Stage) -> Job {
        build_stage_job(
            &rich_nodewright(),
            &golden_settings(),
            StageJobInput {
                package_name: "tuning",
                package: &rich_package(),
                stage,
                node: "ip-10-0-1-234.us-west-2.compute.internal",
                node_order: 4,
            },
        )
    }

    fn golden_interrupt(stage: Stage) -> Job {
        build_interrupt_job(
            &rich_nodewright(),
            &golden_settings(),
            InterruptJobInput {
                package_name: "tuning",
                package: &rich_package(),
                stage,
                interrupt: &Interrupt {
                    kind: InterruptType::Reboot,
                    services: vec![],
                },
                node: "ip-10-0-1-234.us-west-2.compute.internal",
                node_order: 4,
            },
        )
    }

    #[test]
    fn golden_stage_jobs() {
        for stage in [
            Stage::Apply,
            Stage::Config,
            Stage::Upgrade,
            Stage::Uninstall,
            Stage::PostInterrupt,
        ] {
            let job = golden_stage(stage);
            // Field checks against §8 in addition to the snapshot.
            let p = pod(&job);
            assert_eq!(p.termination_grace_period_seconds, Some(45));
            assert_eq!(p.active_deadline_seconds, Some(5400));
            assert_eq!(p.image_pull_secrets.as_ref().unwrap()[0].name, "regcred");
            let inits = p.init_containers.as_ref().unwrap();
            assert_eq!(
                inits[0].image.as_deref(),
                Some(
                    format!(
                        "ghcr.io/nvidia/skyhook-packages/tuning@sha256:{}",
                        "a".repeat(64)
                    )
                    .as_str()
                )
            );
            assert_eq!(inits[1].image.as_deref(), Some("example/agent:v9.9.9"));
            assert!(inits.iter().all(|c| c.resources.is_some()));
            assert_eq!(
                p.containers[0]
                    .resources
                    .as_ref()
                    .unwrap()
                    .limits
                    .as_ref()
                    .unwrap()["cpu"]
                    .0,
                "100m"
            );
            insta::assert_yaml_snapshot!(format!("stage_job_{}", stage.as_str()), job);
        }
    }

    #[test]
    fn golden_interrupt_jobs() {
        for stage in [Stage::Interrupt, Stage::UninstallInterrupt] {
            let job = golden_interrupt(stage);
            assert_eq!(
                job.spec.as_ref().unwrap().active_deadline_seconds,
                Some(5400)
            );
            insta::assert_yaml_snapshot!(format!("interrupt_job_{}", stage.as_str()), job);
        }
    }
}
