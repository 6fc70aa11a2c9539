//! The in-cluster install (`manifests/`) and the container files: every manifest parses into
//! its Kubernetes type, the kustomization lists every file, the CRDs are the generated ones,
//! the Deployment is wired consistently, the settings ConfigMap carries every setting at its
//! default, and RBAC grants exactly what the reconciler's API calls need.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use nodewright_reconciler::plan::{Action, Event, EventObject, EventType, NodePatch, PodRef};
use nodewright_reconciler::settings::Settings;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_yaml::Value;

const NAMESPACE: &str = "nodewright";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace root")
        .to_path_buf()
}

fn manifests() -> PathBuf {
    root().join("manifests")
}

/// Every `.yaml`/`.yml` file under `dir`, as paths relative to it, sorted.
fn yaml_files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(base, &path, out);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            ) {
                out.push(
                    path.strip_prefix(base)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/"),
                );
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn documents(text: &str, what: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{what}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// Every object the kustomization installs, with the file it came from.
fn objects() -> Vec<(String, Value)> {
    let dir = manifests();
    yaml_files(&dir)
        .into_iter()
        .filter(|f| f != "kustomization.yaml")
        .flat_map(|f| {
            let text = std::fs::read_to_string(dir.join(&f)).unwrap();
            documents(&text, &f)
                .into_iter()
                .map(move |d| (f.clone(), d))
        })
        .collect()
}

fn typed<T: DeserializeOwned>(file: &str, v: &Value) -> T {
    let json = serde_json::to_value(v).unwrap();
    serde_json::from_value(json).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn one<T: DeserializeOwned>(kind: &str) -> T {
    let found: Vec<_> = objects()
        .into_iter()
        .filter(|(_, v)| v["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "expected one {kind}");
    typed(&found[0].0, &found[0].1)
}

fn config_map(name: &str) -> ConfigMap {
    objects()
        .into_iter()
        .filter(|(_, v)| v["kind"] == "ConfigMap" && v["metadata"]["name"] == name)
        .map(|(f, v)| typed(&f, &v))
        .next()
        .unwrap_or_else(|| panic!("ConfigMap {name} missing"))
}

#[test]
fn every_manifest_parses_into_its_kubernetes_type() {
    let objects = objects();
    assert!(objects.len() >= 10, "{} objects", objects.len());
    for (file, v) in &objects {
        let kind = v["kind"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: no kind"));
        assert!(v["apiVersion"].as_str().is_some(), "{file}: no apiVersion");
        let name = v["metadata"]["name"].as_str().unwrap_or("");
        assert!(!name.is_empty(), "{file}: {kind} without metadata.name");
        let namespace = v["metadata"]["namespace"].as_str();
        // Parsing into the API type checks the required fields and the field names.
        let namespaced = match kind {
            "Namespace" => typed::<Namespace>(file, v).metadata.namespace.is_some(),
            "CustomResourceDefinition" => {
                typed::<CustomResourceDefinition>(file, v);
                false
            }
            "ClusterRole" => {
                typed::<ClusterRole>(file, v);
                false
            }
            "ClusterRoleBinding" => {
                typed::<ClusterRoleBinding>(file, v);
                false
            }
            "ServiceAccount" => {
                typed::<ServiceAccount>(file, v);
                true
            }
            "Role" => {
                typed::<Role>(file, v);
                true
            }
            "RoleBinding" => {
                typed::<RoleBinding>(file, v);
                true
            }
            "ConfigMap" => {
                typed::<ConfigMap>(file, v);
                true
            }
            "Deployment" => {
                typed::<Deployment>(file, v);
                true
            }
            "Service" => {
                typed::<Service>(file, v);
                true
            }
            other => panic!("{file}: kind {other} is not checked by this test; add it"),
        };
        if namespaced {
            assert_eq!(namespace, Some(NAMESPACE), "{file}: {kind} {name}");
        } else {
            assert_eq!(namespace, None, "{file}: cluster-scoped {kind} {name}");
        }
    }
}

#[test]
fn kustomization_lists_every_manifest_file() {
    let dir = manifests();
    let text = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
    let k: Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(k["kind"], "Kustomization");
    let listed: BTreeSet<String> = k["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    let present: BTreeSet<String> = yaml_files(&dir)
        .into_iter()
        .filter(|f| f != "kustomization.yaml")
        .collect();
    assert_eq!(
        listed, present,
        "manifests/kustomization.yaml `resources` must list exactly the YAML files in manifests/"
    );
}

#[test]
fn crds_are_the_generated_ones() {
    let generated = root().join("schema/crds");
    let installed = manifests().join("crds");
    assert_eq!(
        yaml_files(&generated),
        yaml_files(&installed),
        "manifests/crds must hold the same files as schema/crds"
    );
    for f in yaml_files(&generated) {
        assert_eq!(
            std::fs::read(generated.join(&f)).unwrap(),
            std::fs::read(installed.join(&f)).unwrap(),
            "manifests/crds/{f} drifted from schema/crds/{f}: cp schema/crds/*.yaml manifests/crds/"
        );
    }
}

#[test]
fn deployment_is_wired_to_the_other_manifests() {
    let d: Deployment = one("Deployment");
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2), "two replicas with leader election");
    let pod = spec.template.spec.as_ref().unwrap();
    let sa: ServiceAccount = one("ServiceAccount");
    assert_eq!(pod.service_account_name, sa.metadata.name);

    let c = &pod.containers[0];
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("run"));
    let metrics_addr = args
        .iter()
        .find_map(|a| a.strip_prefix("--metrics-addr="))
        .expect("--metrics-addr");
    let port: i32 = metrics_addr.rsplit(':').next().unwrap().parse().unwrap();
    let ports = c.ports.clone().unwrap_or_default();
    let metrics_port = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .expect("a port named metrics");
    assert_eq!(metrics_port.container_port, port);
    for (probe, path) in [
        (c.liveness_probe.as_ref(), "/healthz"),
        (c.readiness_probe.as_ref(), "/readyz"),
    ] {
        let get = probe.and_then(|p| p.http_get.as_ref()).expect("http probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(
            serde_json::to_value(&get.port).unwrap(),
            serde_json::json!("metrics")
        );
    }
    let svc: Service = one("Service");
    let svc_port = &svc.spec.unwrap().ports.unwrap()[0];
    assert_eq!(
        serde_json::to_value(&svc_port.target_port).unwrap(),
        serde_json::json!("metrics")
    );

    let resources = c.resources.as_ref().expect("resources");
    for key in ["cpu", "memory"] {
        assert!(resources.requests.as_ref().unwrap().contains_key(key));
        assert!(resources.limits.as_ref().unwrap().contains_key(key));
    }

    // Every volume mount has a volume; ConfigMap volumes and env references name objects
    // that the kustomization installs (the git Secret is the user's and optional).
    let volumes = pod.volumes.clone().unwrap_or_default();
    for m in c.volume_mounts.clone().unwrap_or_default() {
        assert!(
            volumes.iter().any(|v| v.name == m.name),
            "mount {} has no volume",
            m.name
        );
    }
    for v in &volumes {
        if let Some(cm) = &v.config_map {
            config_map(&cm.name);
        }
        if let Some(secret) = &v.secret {
            assert_eq!(
                secret.optional,
                Some(true),
                "secret {:?}",
                secret.secret_name
            );
        }
    }
    for e in c.env.clone().unwrap_or_default() {
        if let Some(r) = e.value_from.and_then(|f| f.config_map_key_ref) {
            let cm = config_map(&r.name);
            assert!(
                cm.data.unwrap_or_default().contains_key(&r.key),
                "{} has no key {}",
                r.name,
                r.key
            );
        }
    }
    // Every $(VAR) in the arguments is defined in the container's environment.
    let env: BTreeSet<String> = c
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.name)
        .collect();
    for a in &args {
        if let Some((_, rest)) = a.split_once("$(") {
            let var = rest.split(')').next().unwrap();
            assert!(env.contains(var), "argument {a} uses undefined {var}");
        }
    }
}

#[test]
fn settings_configmap_carries_every_setting_at_its_default() {
    let cm = config_map("nodewright-settings");
    let text = cm.data.unwrap()["settings.yaml"].clone();
    // Settings refuses unknown keys, so this also catches a misspelt one.
    let parsed: Settings = serde_yaml::from_str(&text).expect("settings.yaml parses as Settings");
    parsed.validate().expect("the shipped settings are valid");

    let shipped: serde_yaml::Mapping = serde_yaml::from_str(&text).unwrap();
    let defaults = match serde_yaml::to_value(Settings::default()).unwrap() {
        Value::Mapping(m) => m,
        other => panic!("{other:?}"),
    };
    for (key, default) in &defaults {
        let key = key.as_str().unwrap();
        // The binary stamps its own version; it is not an operator setting (§13.1).
        if key == "operatorVersion" {
            assert!(
                shipped.get(key).is_none(),
                "operatorVersion must not be pinned"
            );
            continue;
        }
        let value = shipped
            .get(key)
            .unwrap_or_else(|| panic!("settings.yaml lacks {key}"));
        if key == "leaderElection" {
            // Two replicas need it; upstream's chart turns it on the same way.
            assert_eq!(value, &Value::Bool(true));
        } else {
            assert_eq!(value, default, "{key} is not at its default");
        }
    }
    let ns: Namespace = one("Namespace");
    assert_eq!(ns.metadata.name.as_deref(), Some(parsed.namespace.as_str()));
}

/// Where a permission is needed: on cluster-scoped objects or in any namespace (ClusterRole), or
/// only in the reconciler's namespace (Role).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Cluster,
    Namespace,
}
use Scope::{Cluster, Namespace as Ns};

type Need = (&'static str, &'static str, &'static str, Scope);

/// The API calls each plan action makes (group, resource, verb, scope). The match has no
/// wildcard arm: a new Action does not compile here until its permissions are stated, and
/// `rbac_grants_exactly_what_the_reconciler_needs` then checks the manifests grant them.
fn action_needs(action: &Action) -> Vec<Need> {
    const NW: &str = "nodewright.nvidia.com";
    match action {
        // Read, merge the delta, patch under the resourceVersion.
        Action::PatchNode(_) => vec![
            ("", "nodes", "get", Cluster),
            ("", "nodes", "patch", Cluster),
        ],
        Action::PatchNodeConditions { .. } => vec![
            ("", "nodes/status", "get", Cluster),
            ("", "nodes/status", "patch", Cluster),
        ],
        // The Job's controller reference to its NodeWright sets blockOwnerDeletion, which
        // OwnerReferencesPermissionEnforcement authorizes as update on the owner's finalizers.
        Action::CreateJob(_) => vec![
            ("batch", "jobs", "create", Ns),
            (NW, "nodewrights/finalizers", "update", Cluster),
        ],
        Action::DeleteJob { .. } => vec![("batch", "jobs", "delete", Ns)],
        Action::SuspendJob { .. } | Action::AnnotateJob { .. } | Action::FailJob { .. } => {
            vec![("batch", "jobs", "patch", Ns)]
        }
        // §8.12: tail the stuck package container's log, then annotate its Job.
        Action::SnapshotLastLogs { .. } => {
            vec![("", "pods/log", "get", Ns), ("batch", "jobs", "patch", Ns)]
        }
        // Workload pods live in any namespace.
        Action::EvictPod(_) => vec![("", "pods/eviction", "create", Cluster)],
        Action::DeletePod(_) => vec![("", "pods", "delete", Cluster)],
        // Server-side apply; an apply that creates is also authorized as create.
        Action::UpsertConfigMap(_) => vec![
            ("", "configmaps", "create", Ns),
            ("", "configmaps", "patch", Ns),
            (NW, "nodewrights/finalizers", "update", Cluster),
        ],
        Action::DeleteConfigMap { .. } => vec![("", "configmaps", "delete", Ns)],
        Action::PatchNodeWrightStatus { .. } => vec![
            (NW, "nodewrights/status", "get", Cluster),
            (NW, "nodewrights/status", "patch", Cluster),
        ],
        Action::PatchNodeWrightAnnotations { .. } => vec![(NW, "nodewrights", "patch", Cluster)],
        Action::SetFinalizer { .. } => vec![
            (NW, "nodewrights", "get", Cluster),
            (NW, "nodewrights", "patch", Cluster),
        ],
        // kube-rs's Recorder (events.k8s.io/v1); events about cluster-scoped objects (Node,
        // NodeWright) are stored in `default`.
        Action::RecordEvent(_) => vec![
            ("events.k8s.io", "events", "create", Cluster),
            ("events.k8s.io", "events", "patch", Cluster),
        ],
    }
}

/// One action of every kind.
fn one_of_each_action() -> Vec<Action> {
    let pod = PodRef {
        namespace: "training".into(),
        name: "worker-0".into(),
        node: "n1".into(),
        nodewright: Some("tuning".into()),
        grace_period_seconds: None,
    };
    vec![
        Action::PatchNode(NodePatch::new("n1")),
        Action::PatchNodeConditions {
            node: "n1".into(),
            set: vec![],
            remove: vec![],
        },
        Action::CreateJob(nodewright_reconciler::job::Job::default().into()),
        Action::DeleteJob {
            name: "j".into(),
            uid: None,
            reason: "stale".into(),
        },
        Action::SuspendJob {
            name: "j".into(),
            suspend: true,
        },
        Action::AnnotateJob {
            name: "j".into(),
            uid: None,
            annotations: BTreeMap::new(),
            ttl_seconds_after_finished: None,
        },
        Action::SnapshotLastLogs {
            job: "j".into(),
            uid: None,
            namespace: "nodewright".into(),
            pod: "j-abcde".into(),
            container: "interrupt".into(),
            fallback: None,
        },
        Action::FailJob {
            name: "j".into(),
            reason: "restart limit".into(),
        },
        Action::EvictPod(pod.clone()),
        Action::DeletePod(pod),
        Action::UpsertConfigMap(Box::default()),
        Action::DeleteConfigMap { name: "cm".into() },
        Action::PatchNodeWrightStatus {
            name: "tuning".into(),
            patch: Box::default(),
        },
        Action::PatchNodeWrightAnnotations {
            name: "tuning".into(),
            annotations: BTreeMap::new(),
        },
        Action::SetFinalizer {
            name: "tuning".into(),
            present: true,
        },
        Action::RecordEvent(Event {
            object: EventObject::Node("n1".into()),
            kind: EventType::Normal,
            reason: "Apply".into(),
            message: "m".into(),
        }),
    ]
}

/// Calls that are not plan actions: the reflectors behind the snapshot, materializing CRs from
/// Git, stage logs, leader election.
fn standing_needs() -> Vec<(Need, &'static str)> {
    const NW: &str = "nodewright.nvidia.com";
    let mut out = Vec::new();
    for verb in ["list", "watch"] {
        out.push((("", "nodes", verb, Cluster), "node reflector"));
        out.push((
            ("", "pods", verb, Cluster),
            "workload pods of nodes under drain",
        ));
        out.push((("", "pods", verb, Ns), "package pod reflector"));
        out.push((("batch", "jobs", verb, Ns), "Job reflector"));
        out.push((("", "configmaps", verb, Ns), "ConfigMap reflectors"));
        out.push(((NW, "nodewrights", verb, Cluster), "NodeWright reflector"));
        out.push((
            (NW, "deploymentpolicies", verb, Cluster),
            "policy reflector",
        ));
    }
    // Server-side apply of the declared CRs (creating ones that do not exist), then deleting
    // the ones this reconciler materialized that Git no longer declares.
    for verb in ["create", "patch", "list", "delete"] {
        out.push((
            (NW, "nodewrights", verb, Cluster),
            "materializing Git's CRs",
        ));
        out.push((
            (NW, "deploymentpolicies", verb, Cluster),
            "materializing Git's CRs",
        ));
    }
    for verb in ["get", "create", "update"] {
        out.push((
            ("coordination.k8s.io", "leases", verb, Ns),
            "leader election",
        ));
    }
    out
}

/// (group, resource, verb) triples a set of rules grants.
fn grants(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for r in rules {
        assert!(
            r.resource_names.is_none() && r.non_resource_urls.is_none(),
            "unexpected rule shape {r:?}"
        );
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    assert!(
                        g != "*" && res != "*" && v != "*",
                        "wildcards are not least privilege: {r:?}"
                    );
                    out.insert((g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
    out
}

#[test]
fn rbac_grants_exactly_what_the_reconciler_needs() {
    let actions = one_of_each_action();
    let kinds: BTreeSet<&str> = actions.iter().map(Action::kind).collect();
    assert_eq!(kinds.len(), actions.len(), "one sample per Action kind");

    let mut needs: Vec<(Need, String)> = standing_needs()
        .into_iter()
        .map(|(n, why)| (n, why.to_string()))
        .collect();
    for a in &actions {
        for n in action_needs(a) {
            needs.push((n, format!("Action {}", a.kind())));
        }
    }

    // The roles must be bound to the reconciler's ServiceAccount.
    let sa: ServiceAccount = one("ServiceAccount");
    let sa_name = sa.metadata.name.unwrap();
    let crb: ClusterRoleBinding = one("ClusterRoleBinding");
    let rb: RoleBinding = one("RoleBinding");
    let cr: ClusterRole = one("ClusterRole");
    let role: Role = one("Role");
    for (subjects, role_ref, kind, name) in [
        (
            &crb.subjects,
            &crb.role_ref,
            "ClusterRole",
            &cr.metadata.name,
        ),
        (&rb.subjects, &rb.role_ref, "Role", &role.metadata.name),
    ] {
        assert_eq!(role_ref.kind, kind);
        assert_eq!(Some(&role_ref.name), name.as_ref());
        assert!(subjects.iter().flatten().any(|s| s.kind == "ServiceAccount"
            && s.name == sa_name
            && s.namespace.as_deref() == Some(NAMESPACE)));
    }
    assert_eq!(rb.metadata.namespace.as_deref(), Some(NAMESPACE));

    let cluster = grants(&cr.rules.unwrap_or_default());
    let namespaced = grants(&role.rules.unwrap_or_default());
    let key = |n: &Need| (n.0.to_string(), n.1.to_string(), n.2.to_string());

    // Coverage: every call is allowed where it happens.
    for (n, why) in &needs {
        let ok = match n.3 {
            Cluster => cluster.contains(&key(n)),
            Ns => namespaced.contains(&key(n)) || cluster.contains(&key(n)),
        };
        assert!(ok, "RBAC does not allow {n:?}, needed by {why}");
    }
    // Least privilege: every grant is needed, and at the narrowest scope.
    for g in &cluster {
        assert!(
            needs.iter().any(|(n, _)| n.3 == Cluster && key(n) == *g),
            "ClusterRole grants {g:?}, which nothing needs cluster-wide"
        );
    }
    for g in &namespaced {
        assert!(
            needs.iter().any(|(n, _)| n.3 == Ns && key(n) == *g),
            "Role grants {g:?}, which nothing needs"
        );
    }
}

#[test]
fn every_rbac_rule_carries_a_justifying_comment() {
    for file in ["rbac/cluster-role.yaml", "rbac/role.yaml"] {
        let text = std::fs::read_to_string(manifests().join(file)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut rules = 0;
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("- apiGroups:") {
                rules += 1;
                assert!(
                    i > 0 && lines[i - 1].trim_start().starts_with('#'),
                    "{file}:{}: rule without a comment saying which action or watch needs it",
                    i + 1
                );
            }
        }
        assert!(rules > 0, "{file} has no rules");
    }
}

#[test]
fn kubectl_kustomize_renders_the_manifests() {
    let output = match Command::new("kubectl")
        .arg("kustomize")
        .arg(manifests())
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: kubectl is not installed");
            return;
        }
        Err(e) => panic!("kubectl: {e}"),
    };
    assert!(
        output.status.success(),
        "kubectl kustomize failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered = documents(
        &String::from_utf8(output.stdout).unwrap(),
        "kustomize output",
    );
    let mut rendered_kinds: Vec<String> = rendered
        .iter()
        .map(|v| {
            format!(
                "{}/{}",
                v["kind"].as_str().unwrap(),
                v["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    let mut source_kinds: Vec<String> = objects()
        .iter()
        .map(|(_, v)| {
            format!(
                "{}/{}",
                v["kind"].as_str().unwrap(),
                v["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    rendered_kinds.sort();
    source_kinds.sort();
    assert_eq!(rendered_kinds, source_kinds);
    let deployment = rendered.iter().find(|v| v["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "nodewright-gitops/reconciler:v0.1.0",
        "the kustomization's images: entry sets the tag"
    );
}

/// The final stage of a Containerfile (after its last FROM).
fn final_stage(text: &str) -> &str {
    let at = text.rfind("\nFROM ").expect("a FROM line");
    &text[at..]
}

fn binary_name(crate_dir: &str) -> String {
    let cargo = std::fs::read_to_string(root().join(crate_dir).join("Cargo.toml")).unwrap();
    let bin = cargo.split("[[bin]]").nth(1).expect("a [[bin]] section");
    let line = bin
        .lines()
        .find(|l| l.trim_start().starts_with("name"))
        .unwrap();
    line.split('"').nth(1).unwrap().to_string()
}

#[test]
fn containerfiles_build_the_right_binaries() {
    let reconciler = std::fs::read_to_string(root().join("reconciler/Containerfile")).unwrap();
    let bin = binary_name("reconciler");
    assert!(
        reconciler.contains(&format!("--bin {bin}")),
        "reconciler/Containerfile"
    );
    let runtime = final_stage(&reconciler);
    // Status commits are pushed with the git CLI; ssh remotes need ssh.
    assert!(runtime.contains(" git "), "runtime stage must install git");
    assert!(runtime.contains("openssh-client"));
    assert!(runtime.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{bin}\"]")));
    assert!(
        runtime.contains("USER 65532"),
        "non-root like deployment.yaml"
    );

    let agent = std::fs::read_to_string(root().join("agent/Containerfile")).unwrap();
    let bin = binary_name("agent");
    assert!(
        agent.contains(&format!("--bin {bin}")),
        "agent/Containerfile"
    );
    let runtime = final_stage(&agent);
    assert!(runtime.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{bin}\"]")));
    assert!(runtime.contains("distroless/static") || runtime.contains("RUNTIME_IMAGE"));
    assert!(!runtime.contains("apt-get") && !runtime.contains("apk add"));
}
