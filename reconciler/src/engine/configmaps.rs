//! The node-metadata ConfigMap (spec/operator.md §9.1) and the package ConfigMaps (§9.2),
//! with the config-update step of §6.8 as amended for lazy admission (§16.3): the
//! ConfigMap always follows the spec, `status.configUpdates` publishes the changed keys,
//! and each node's `configApplied_<nw>` record decides its own config cycle.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use nodewright_schema::{Interrupt, NodeWright, keys, names};
use serde::Serialize;

use super::complete::{self, RecordText};
use super::context::PassCtx;
use super::write_order::After;
use crate::plan::Action;
use crate::settings::Settings;

fn owner_reference(nw: &NodeWright) -> OwnerReference {
    OwnerReference {
        api_version: keys::API_VERSION.to_string(),
        kind: keys::KIND_NODEWRIGHT.to_string(),
        name: nw.name().to_string(),
        uid: nw.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// `packages.json` of the node-metadata ConfigMap (§9.1), built from the current spec.
pub fn packages_json(nw: &NodeWright, settings: &Settings) -> String {
    let packages = nw
        .spec
        .packages()
        .iter()
        .map(|(name, p)| {
            let entry = PackageMetadata {
                name,
                version: &p.version,
                image: &p.image,
                agent_image_override: p.agent_image_override.as_deref().filter(|s| !s.is_empty()),
                interrupt: p.interrupt.as_ref(),
                config_interrupts: Some(p.config_interrupts()).filter(|c| !c.is_empty()),
            };
            (name.as_str(), entry)
        })
        .collect();
    let root = PackagesJson {
        agent_version: settings.agent_version().to_string(),
        packages,
    };
    // Borrowed strings and maps with string keys always serialize.
    serde_json::to_string(&root).unwrap_or_default()
}

/// The document of `packages.json` (§9.1), in upstream's field order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PackagesJson<'a> {
    agent_version: String,
    packages: BTreeMap<&'a str, PackageMetadata<'a>>,
}

/// One package of `packages.json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PackageMetadata<'a> {
    name: &'a str,
    version: &'a str,
    image: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_image_override: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interrupt: Option<&'a Interrupt>,
    #[serde(skip_serializing_if = "Option::is_none")]
    config_interrupts: Option<&'a BTreeMap<String, Interrupt>>,
}

/// The node-metadata ConfigMap of a node (§9.1); `None` for a node without labels and
/// annotations.
pub fn node_metadata_configmap(
    nw: &NodeWright,
    settings: &Settings,
    node: &str,
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> Option<ConfigMap> {
    let name = names::node_metadata_configmap(nw.name(), node);
    named_node_metadata_configmap(nw, settings, name, node, annotations, labels)
}

/// [`node_metadata_configmap`] under its `name`, as the pass remembers it for the node.
fn named_node_metadata_configmap(
    nw: &NodeWright,
    settings: &Settings,
    name: String,
    node: &str,
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> Option<ConfigMap> {
    if annotations.is_empty() && labels.is_empty() {
        return None;
    }
    let data = BTreeMap::from([
        (
            "annotations.json".to_string(),
            serde_json::to_string(annotations).unwrap_or_default(),
        ),
        (
            "labels.json".to_string(),
            serde_json::to_string(labels).unwrap_or_default(),
        ),
        ("packages.json".to_string(), packages_json(nw, settings)),
    ]);
    Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(settings.namespace.clone()),
            labels: Some(BTreeMap::from([(
                keys::CONFIGMAP_LABEL_NODE_META.to_string(),
                nw.name().to_string(),
            )])),
            annotations: Some(BTreeMap::from([
                (
                    keys::CONFIGMAP_ANNOTATION_NAME.to_string(),
                    nw.name().to_string(),
                ),
                (
                    keys::CONFIGMAP_ANNOTATION_NODE_NAME.to_string(),
                    node.to_string(),
                ),
            ])),
            owner_references: Some(vec![owner_reference(nw)]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    })
}

/// The package ConfigMap (§9.2).
pub fn package_configmap(nw: &NodeWright, settings: &Settings, name: &str) -> Option<ConfigMap> {
    let p = nw.spec.packages().get(name)?;
    if p.config_map().is_empty() {
        return None;
    }
    Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(names::package_configmap(nw.name(), name, &p.version)),
            namespace: Some(settings.namespace.clone()),
            labels: Some(BTreeMap::from([(
                keys::CONFIGMAP_LABEL_NAME.to_string(),
                nw.name().to_string(),
            )])),
            annotations: Some(BTreeMap::from([
                (
                    keys::CONFIGMAP_ANNOTATION_NAME.to_string(),
                    nw.name().to_string(),
                ),
                (
                    keys::CONFIGMAP_ANNOTATION_PACKAGE_NAME.to_string(),
                    name.to_string(),
                ),
                (
                    keys::CONFIGMAP_ANNOTATION_PACKAGE_VERSION.to_string(),
                    p.version.clone(),
                ),
            ])),
            owner_references: Some(vec![owner_reference(nw)]),
            ..ObjectMeta::default()
        },
        data: Some(p.config_map().clone()),
        ..ConfigMap::default()
    })
}

fn existing<'s>(ctx: &PassCtx<'s>, name: &str) -> Option<&'s ConfigMap> {
    ctx.index.config_map_by_name.get(name).copied()
}

fn already_upserted(ctx: &PassCtx<'_>, name: &str) -> bool {
    ctx.config_map_upserted(name)
}

/// Upserts a node's metadata ConfigMap when its data differs (before a Job is created, §6.3
/// step 5, §6.12).
pub fn upsert_node_metadata(ctx: &mut PassCtx<'_>, nw: usize, node: usize) {
    let n = ctx.node(node);
    // One upsert per ConfigMap and pass: once it is written, building it again for every
    // further package dispatched on the node (its data holds the node's annotations, so the
    // whole node state) would cost packages × packages per pass and change nothing.
    let name = ctx.metadata_configmap_name(nw, node);
    if already_upserted(ctx, &name) {
        return;
    }
    let Some(cm) = named_node_metadata_configmap(
        ctx.nws[nw].nw,
        ctx.settings,
        name,
        n.name(),
        n.annotations(),
        n.labels(),
    ) else {
        return;
    };
    let name = cm.metadata.name.clone().unwrap_or_default();
    if existing(ctx, &name).is_some_and(|c| c.data == cm.data) {
        return;
    }
    ctx.emit(Action::UpsertConfigMap(Box::new(cm)));
}

/// Preamble step 5b (§9.1): delete the metadata ConfigMaps of nodes no longer selected and
/// rewrite a stale `packages.json` on the others.
pub fn node_metadata(ctx: &mut PassCtx<'_>, nw: usize) {
    let view = &ctx.nws[nw];
    let nw_name = view.name.to_string();
    // A ConfigMap is kept when it has the name of a selected node's ConfigMap. It names its
    // node in an annotation, so one name is derived per ConfigMap; the names of every
    // selected node (a hash each) only when some ConfigMap does not say, or says wrongly.
    let mut every_name: Option<BTreeSet<String>> = None;
    let mut belongs = |name: &str, cm: &ConfigMap| {
        let node = cm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::CONFIGMAP_ANNOTATION_NODE_NAME));
        if let Some(id) = node.and_then(|node| ctx.node_id(node))
            && view.selects(id)
            && ctx.is_metadata_configmap_of(nw, id, name)
        {
            return true;
        }
        every_name
            .get_or_insert_with(|| {
                view.selected
                    .iter()
                    .map(|&id| names::node_metadata_configmap(&nw_name, ctx.node(id).name()))
                    .collect()
            })
            .contains(name)
    };
    let packages = packages_json(view.nw, ctx.settings);
    let mut deletes = Vec::new();
    let mut refresh = HashSet::new();
    for cm in &ctx.snap.config_maps {
        let is_ours = cm
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::CONFIGMAP_LABEL_NODE_META))
            == Some(&nw_name);
        if !is_ours {
            continue;
        }
        let name = cm.metadata.name.as_deref().unwrap_or_default();
        if !belongs(name, cm) {
            deletes.push(name.to_string());
        } else if cm.data.as_ref().and_then(|d| d.get("packages.json")) != Some(&packages) {
            refresh.insert(name);
        }
    }
    for name in deletes {
        ctx.emit(Action::DeleteConfigMap { name });
    }
    if !refresh.is_empty() {
        let ids = ctx.nws[nw].selected.clone();
        for id in ids {
            let name = names::node_metadata_configmap(&nw_name, ctx.node(id).name());
            if refresh.contains(name.as_str()) {
                upsert_node_metadata(ctx, nw, id);
            }
        }
    }
}

/// Keys new or changed between a ConfigMap's data and the spec (§6.8; removed keys are not
/// listed).
pub fn changed_keys(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Vec<String> {
    new.iter()
        .filter(|(k, v)| old.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect()
}

/// A spec package with a configMap, as the backfill of applied-config records reads it.
struct ConfiguredPackage<'s> {
    name: &'s str,
    version: &'s str,
    entry_key: String,
    /// What the nodes last applied: the existing ConfigMap's data, else the spec's.
    data: &'s BTreeMap<String, String>,
    /// The sha256 hex of each value of `data`, in its order.
    digests: Vec<String>,
}

impl ConfiguredPackage<'_> {
    /// The record a node that applied `data` keeps: key → sha256 hex (§16.3).
    fn record(&self) -> BTreeMap<RecordText<'_>, RecordText<'_>> {
        self.data
            .keys()
            .zip(&self.digests)
            .map(|(k, digest)| {
                (
                    RecordText(k.as_str().into()),
                    RecordText(digest.as_str().into()),
                )
            })
            .collect()
    }
}

/// Preamble step 5c (§9.2, §6.8, §16.3): package ConfigMaps follow the spec; a data change
/// publishes its changed keys in `status.configUpdates`; complete entries that have no
/// applied-config record yet get one (backfill, no re-run).
pub fn package_configmaps(ctx: &mut PassCtx<'_>, nw: usize) {
    let view = &ctx.nws[nw];
    let nw_obj = view.nw;
    let nw_name = view.name.to_string();
    let packages = nw_obj.spec.packages();
    let selected = view.selected.clone();

    // Spec packages in their uninstall cycle on any node get no config work (§6.8, §9.2);
    // the nodes' package digests say which.
    let mut in_cycle = vec![false; packages.len()];
    for &id in &selected {
        ctx.node_digest(nw, id, |digest| {
            for (any, node) in in_cycle
                .iter_mut()
                .zip(digest.map_or(&[][..], |d| &d.packages))
            {
                *any |= node.in_cycle;
            }
        });
    }

    // Backfill records from what the nodes last applied: the existing ConfigMap's data.
    let key = ctx.nws[nw].keys.config_applied.clone();
    let configured: Vec<ConfiguredPackage<'_>> = packages
        .iter()
        .filter(|(_, p)| !p.config_map().is_empty())
        .map(|(name, p)| {
            let data = existing(ctx, &names::package_configmap(&nw_name, name, &p.version))
                .and_then(|c| c.data.as_ref())
                .unwrap_or_else(|| p.config_map());
            ConfiguredPackage {
                name,
                version: &p.version,
                entry_key: nodewright_schema::node_state::entry_key(name, &p.version),
                digests: data.values().map(|v| complete::sha256_hex(v)).collect(),
                data,
            }
        })
        .collect();
    for &id in &selected {
        if ctx.node_digest(nw, id, |digest| digest.is_some_and(|d| d.records_current)) {
            continue;
        }
        let n = ctx.node(id);
        let raw = n.annotation(&key);
        let Ok(state) = n.state(ctx.nws[nw].state_key()) else {
            continue;
        };
        let mut applied = complete::read_applied(raw);
        // Records of entries that are gone (an upgrade removed the old version, an uninstall
        // removed the package) describe nothing any more.
        let before = applied.len();
        applied.retain(|k, _| state.0.contains_key(k.0.as_ref()));
        let mut changed = applied.len() != before;
        for package in &configured {
            let entry_key = RecordText(package.entry_key.as_str().into());
            if applied.contains_key(&entry_key) {
                continue;
            }
            let Some(e) = state.get(package.name, package.version) else {
                continue;
            };
            if !complete::config_applied_in(e) {
                continue;
            }
            applied.insert(entry_key, package.record());
            changed = true;
        }
        if !changed {
            continue;
        }
        let value =
            (!applied.is_empty()).then(|| serde_json::to_string(&applied).unwrap_or_default());
        match value {
            None => ctx.node_mut(id).remove_annotation(&key),
            Some(value) => ctx.node_mut(id).set_annotation(key.clone(), value),
        }
    }

    // Delete ConfigMaps that match no spec package/version (§9.2); an emptied configMap keeps
    // its ConfigMap (still expected by name).
    let expected: BTreeSet<String> = packages
        .iter()
        .map(|(name, p)| names::package_configmap(&nw_name, name, &p.version))
        .collect();
    let mut deletes = Vec::new();
    let mut version_changed: BTreeSet<String> = BTreeSet::new();
    for cm in &ctx.snap.config_maps {
        let labels = cm.metadata.labels.as_ref();
        let ours = labels.and_then(|l| l.get(keys::CONFIGMAP_LABEL_NAME)) == Some(&nw_name)
            && labels.is_none_or(|l| !l.contains_key(keys::CONFIGMAP_LABEL_NODE_META));
        let name = cm.metadata.name.clone().unwrap_or_default();
        if ours && !expected.contains(&name) {
            if let Some(pkg) = cm
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::CONFIGMAP_ANNOTATION_PACKAGE_NAME))
            {
                version_changed.insert(pkg.clone());
            }
            deletes.push(name);
        }
    }
    for name in deletes {
        ctx.emit(Action::DeleteConfigMap { name });
    }

    let mut updates: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut clears: BTreeSet<String> = BTreeSet::new();
    let mut upserts = Vec::new();
    for ((name, p), &cycling) in packages.iter().zip(&in_cycle) {
        if cycling || p.config_map().is_empty() {
            continue;
        }
        let cm_name = names::package_configmap(&nw_name, name, &p.version);
        match existing(ctx, &cm_name) {
            None => {
                if version_changed.contains(name) {
                    // §6.6: a version change clears the package's config updates.
                    clears.insert(name.clone());
                }
                upserts.push(name.clone());
            }
            Some(cm) => {
                let old = cm.data.clone().unwrap_or_default();
                if &old != p.config_map() {
                    updates.insert(name.clone(), changed_keys(&old, p.config_map()));
                    upserts.push(name.clone());
                }
            }
        }
    }
    // Packages that left the spec (§6.11) and version changes (§6.6) clear their list; an
    // applied update replaces it (§6.8: the previous list is cleared first).
    let status = &mut ctx.nws[nw].status;
    if let Some(cu) = status.config_updates.as_mut() {
        cu.retain(|pkg, _| packages.contains_key(pkg) && !clears.contains(pkg));
    }
    for (pkg, keys) in updates {
        if keys.is_empty() {
            continue;
        }
        status
            .config_updates
            .get_or_insert_with(BTreeMap::new)
            .insert(pkg, keys);
    }
    if status
        .config_updates
        .as_ref()
        .is_some_and(BTreeMap::is_empty)
    {
        status.config_updates = None;
    }
    // §6.8: the changed keys are saved before the ConfigMap that no longer shows them.
    for name in upserts {
        if let Some(cm) = package_configmap(nw_obj, ctx.settings, &name) {
            ctx.emit_after(
                Action::UpsertConfigMap(Box::new(cm)),
                [After::Status(nw_name.clone())],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_schema::{Interrupt, InterruptType, Package};

    #[test]
    fn packages_json_lists_spec_packages_in_upstream_field_order() {
        let mut nw = NodeWright::new("nw", Default::default());
        nw.spec.packages = Some(BTreeMap::from([(
            "tuning".to_string(),
            Package {
                version: "1.0.0".into(),
                image: "example/tuning".into(),
                interrupt: Some(Interrupt {
                    kind: InterruptType::Reboot,
                    services: vec![],
                }),
                ..Package::default()
            },
        )]));
        assert_eq!(
            packages_json(&nw, &Settings::default()),
            r#"{"agentVersion":"v7.0.0","packages":{"tuning":{"name":"tuning","version":"1.0.0","image":"example/tuning","interrupt":{"type":"reboot"}}}}"#
        );
    }

    #[test]
    fn changed_keys_list_new_and_different_values_only() {
        let old = BTreeMap::from([
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), "2".to_string()),
        ]);
        let new = BTreeMap::from([
            ("a".to_string(), "1".to_string()),
            ("c".to_string(), "3".to_string()),
        ]);
        assert_eq!(changed_keys(&old, &new), ["c"]);
    }

    #[test]
    fn metadata_configmap_is_skipped_for_a_bare_node() {
        let nw = NodeWright::new("nw", Default::default());
        assert!(
            node_metadata_configmap(
                &nw,
                &Settings::default(),
                "n",
                &BTreeMap::new(),
                &BTreeMap::new()
            )
            .is_none()
        );
        let cm = node_metadata_configmap(
            &nw,
            &Settings::default(),
            "n",
            &BTreeMap::new(),
            &BTreeMap::from([("k".to_string(), "v".to_string())]),
        )
        .unwrap();
        assert_eq!(
            cm.metadata.name.unwrap(),
            names::node_metadata_configmap("nw", "n")
        );
        assert_eq!(cm.data.unwrap()["labels.json"], r#"{"k":"v"}"#);
    }

    #[test]
    fn golden_configmaps() {
        let mut nw = NodeWright::new("gpu-init", Default::default());
        nw.metadata.uid = Some("uid-1".into());
        nw.spec.packages = Some(BTreeMap::from([(
            "tuning".to_string(),
            Package {
                version: "1.2.3".into(),
                image: "example/tuning".into(),
                config_map: Some(BTreeMap::from([
                    ("a.conf".to_string(), "x=1\n".to_string()),
                    ("b.conf".to_string(), "y=2\n".to_string()),
                ])),
                config_interrupts: Some(BTreeMap::from([(
                    "*.conf".to_string(),
                    Interrupt {
                        kind: InterruptType::Service,
                        services: vec!["kubelet".into()],
                    },
                )])),
                ..Package::default()
            },
        )]));
        let settings = Settings::default();
        let pkg = package_configmap(&nw, &settings, "tuning").unwrap();
        assert_eq!(pkg.metadata.name.as_deref(), Some("gpu-init-tuning-1.2.3"));
        insta::assert_yaml_snapshot!("package_configmap", pkg);
        let meta = node_metadata_configmap(
            &nw,
            &settings,
            "node-a",
            &BTreeMap::from([(
                "nodewright.nvidia.com/status_gpu-init".to_string(),
                "in_progress".to_string(),
            )]),
            &BTreeMap::from([("pool".to_string(), "gpu".to_string())]),
        )
        .unwrap();
        insta::assert_yaml_snapshot!("node_metadata_configmap", meta);
    }

    use super::super::context::PassCtx;
    use super::super::testkit::{self, node, settings, world};
    use nodewright_schema::{Stage, State};

    fn with_config(value: &str) -> Package {
        let mut p = testkit::package("tuning", "1.0.0");
        p.config_map = Some(BTreeMap::from([("a.conf".to_string(), value.to_string())]));
        p
    }

    #[test]
    fn node_metadata_configmaps_are_kept_by_name_whatever_their_node_annotation_says() {
        let nw = testkit::nw("nw").selects("pool", "gpu").build();
        let s = settings();
        let meta = |node: &str| {
            node_metadata_configmap(
                &nw,
                &s,
                node,
                &BTreeMap::new(),
                &BTreeMap::from([("pool".to_string(), "gpu".to_string())]),
            )
            .unwrap()
        };
        let set_node = |mut cm: ConfigMap, node: Option<&str>| {
            let a = cm.metadata.annotations.get_or_insert_with(BTreeMap::new);
            match node {
                Some(node) => a.insert(keys::CONFIGMAP_ANNOTATION_NODE_NAME.into(), node.into()),
                None => a.remove(keys::CONFIGMAP_ANNOTATION_NODE_NAME),
            };
            cm
        };
        let mut snap = world()
            .node(node("n1").label("pool", "gpu"))
            .node(node("n2").label("pool", "gpu"))
            .node(node("n3").label("pool", "gpu"))
            .node(node("other").label("pool", "cpu"))
            .nw(testkit::nw("nw").selects("pool", "gpu"))
            .build();
        let packages = packages_json(&snap.nodewrights[0], &s);
        let config_maps = vec![
            // Kept: names its own, selected node.
            meta("n1"),
            // Kept: n2's ConfigMap, though its annotation names another node.
            set_node(meta("n2"), Some("n1")),
            // Kept: n3's ConfigMap without the annotation.
            set_node(meta("n3"), None),
            // Deleted: a node the NodeWright does not select.
            meta("other"),
            // Deleted: a name no selected node has, though it names a selected node.
            {
                let mut cm = meta("n1");
                cm.metadata.name = Some("nw-n1-metadata-stale".into());
                cm
            },
        ];
        snap.config_maps = config_maps
            .into_iter()
            .map(|mut cm: ConfigMap| {
                cm.data
                    .get_or_insert_with(BTreeMap::new)
                    .insert("packages.json".into(), packages.clone());
                std::sync::Arc::new(cm)
            })
            .collect();
        let mut ctx = PassCtx::new(&snap, &s);
        node_metadata(&mut ctx, 0);
        let deleted: Vec<&str> = ctx
            .emitted()
            .iter()
            .filter_map(|a| match a {
                Action::DeleteConfigMap { name } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        let other = names::node_metadata_configmap("nw", "other");
        assert_eq!(deleted, vec![other.as_str(), "nw-n1-metadata-stale"]);
    }

    #[test]
    fn a_changed_configmap_is_updated_and_its_keys_published() {
        let old = package_configmap(
            &testkit::nw("nw")
                .with_package("tuning", with_config("1"))
                .build(),
            &settings(),
            "tuning",
        )
        .unwrap();
        let mut stale = old.clone();
        stale.metadata.name = Some("nw-tuning-0.9.0".into());
        let mut snap = world()
            .node(node("n1").state("nw", &[("tuning", "1.0.0", Stage::Config, State::Complete)]))
            .nw(testkit::nw("nw").with_package("tuning", with_config("2")))
            .build();
        snap.config_maps = vec![std::sync::Arc::new(old), std::sync::Arc::new(stale)];
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        package_configmaps(&mut ctx, 0);
        assert_eq!(
            ctx.nws[0].status.config_updates,
            Some(BTreeMap::from([(
                "tuning".to_string(),
                vec!["a.conf".to_string()]
            )]))
        );
        let kinds: Vec<String> = ctx
            .emitted()
            .iter()
            .map(|a| match a {
                Action::DeleteConfigMap { name } => format!("delete {name}"),
                Action::UpsertConfigMap(c) => format!(
                    "upsert {} {}",
                    c.metadata.name.clone().unwrap_or_default(),
                    c.data.as_ref().unwrap()["a.conf"]
                ),
                other => other.kind().to_string(),
            })
            .collect();
        assert_eq!(
            kinds,
            ["delete nw-tuning-0.9.0", "upsert nw-tuning-1.0.0 2"]
        );
        // The node that applied "1" got its record backfilled from the live ConfigMap, so it
        // now owes a config cycle for "2".
        let id = ctx.node_id("n1").unwrap();
        let applied = complete::parse_applied(ctx.node(id).annotation(&keys::config_applied("nw")));
        assert_eq!(applied["tuning|1.0.0"]["a.conf"], complete::sha256_hex("1"));
    }

    #[test]
    fn a_record_is_pruned_of_gone_entries_and_keeps_escaped_text_as_it_was() {
        let digest = complete::sha256_hex("1");
        let record = format!(
            r#"{{"old|0.9.0":{{"a.conf":"{digest}"}},"tuning|1.0.0":{{"a\"b\\c.conf":"{digest}"}}}}"#
        );
        let snap = world()
            .node(
                node("n1")
                    .state("nw", &[("tuning", "1.0.0", Stage::Config, State::Complete)])
                    .annotation(&keys::config_applied("nw"), &record),
            )
            .nw(testkit::nw("nw").with_package("tuning", with_config("1")))
            .build();
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        package_configmaps(&mut ctx, 0);
        let id = ctx.node_id("n1").unwrap();
        let written = ctx
            .node(id)
            .annotation(&keys::config_applied("nw"))
            .unwrap();
        assert_eq!(
            written,
            format!(r#"{{"tuning|1.0.0":{{"a\"b\\c.conf":"{digest}"}}}}"#)
        );
        let applied = complete::parse_applied(Some(written));
        assert_eq!(applied["tuning|1.0.0"]["a\"b\\c.conf"], digest);
    }
}
