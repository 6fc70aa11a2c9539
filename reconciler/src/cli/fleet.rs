//! Simulated fleets for `run` (no cluster configured) and `demo`: a scenario-format
//! description (`cluster:` and `packages:` blocks, spec/scenarios.md §2–§3) built into a
//! [`SimCluster`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::scenario::format::{ClusterSpec, NodeEntry, NodeSpecEntry};
use crate::sim::{ModelRunner, PackageModel, PackageModels, SimCluster};

/// The labels of a generated simulator node (`sim serve --nodes`, `run --sim-nodes`): its
/// hostname and `nvidia.com/gpu.present=true`, which the NodeWrights of `examples/fleet` select.
/// No rollout pool label: such nodes fall in the example policy's default compartment.
pub fn generated_node_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), name.to_string()),
        ("nvidia.com/gpu.present".to_string(), "true".to_string()),
    ])
}

/// A fleet description.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    /// Nodes, workload pods and PDBs.
    #[serde(default)]
    pub cluster: ClusterSpec,
    /// Package behaviour models by image.
    #[serde(default)]
    pub packages: BTreeMap<String, PackageModel>,
}

/// The demo's fleet: 24 GPU nodes in two pools (canary and production), long-running
/// training pods (one protected from interruption), and a web service behind a PDB.
pub const DEMO_FLEET: &str = r#"
cluster:
  nodes:
    - generate: {count: 4, namePrefix: canary-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: canary}}
    - generate: {count: 20, namePrefix: gpu-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: production}}
  pods:
    - {name: train-0, namespace: ml, node: gpu-0, labels: {app: trainer}, owner: StatefulSet}
    - {name: train-1, namespace: ml, node: gpu-1, labels: {app: trainer}, owner: StatefulSet}
    - {name: train-2, namespace: ml, node: gpu-7, labels: {app: trainer, workload.example.com/protect: "true"}, owner: Job, runFor: 6m}
    - {name: web-0, namespace: default, node: gpu-2, labels: {app: web}}
    - {name: web-1, namespace: default, node: gpu-3, labels: {app: web}}
    - {name: web-2, namespace: default, node: gpu-4, labels: {app: web}}
  pdbs:
    - {name: web, namespace: default, selector: {app: web}, minAvailable: 2}
packages:
  example/tuning:
    default: {duration: 3s}
    stages:
      apply: {duration: 20s}
      config: {duration: 8s}
      upgrade: {duration: 15s}
    rebootTakes: 75s
  example/driver:
    default: {duration: 5s}
    stages:
      apply: {duration: 40s}
      post-interrupt: {duration: 10s}
    rebootTakes: 90s
  example/toolkit:
    default: {duration: 6s}
"#;

impl Fleet {
    /// Parses a fleet from YAML (a scenario file's `cluster:`/`packages:` blocks; other
    /// top-level keys of a scenario are ignored).
    pub fn parse(yaml: &str) -> Result<Fleet, String> {
        let value: serde_yaml::Value = serde_yaml::from_str(yaml).map_err(|e| e.to_string())?;
        let mut mapping = serde_yaml::Mapping::new();
        for key in ["cluster", "packages"] {
            if let Some(v) = value.get(key) {
                mapping.insert(key.into(), v.clone());
            }
        }
        serde_yaml::from_value(serde_yaml::Value::Mapping(mapping)).map_err(|e| e.to_string())
    }

    /// `count` unlabelled nodes named `node-0 …`, all packages succeeding with default
    /// durations.
    pub fn plain(count: usize) -> Fleet {
        Fleet::parse(&format!(
            "cluster:\n  nodes:\n    - generate: {{count: {count}, namePrefix: node-}}\n"
        ))
        .unwrap_or(Fleet {
            cluster: ClusterSpec::default(),
            packages: BTreeMap::new(),
        })
    }

    /// `count` GPU nodes `node-1 …` exactly as `sim serve --nodes` makes them (the labels of
    /// [`generated_node_labels`], so `examples/fleet` selects every one), all packages
    /// succeeding with default durations.
    pub fn gpu_nodes(count: usize) -> Fleet {
        let nodes = (1..=count)
            .map(|i| {
                let name = format!("node-{i}");
                NodeEntry::Node(NodeSpecEntry {
                    labels: generated_node_labels(&name),
                    name,
                    annotations: BTreeMap::new(),
                    taints: Vec::new(),
                    unschedulable: false,
                })
            })
            .collect();
        Fleet {
            cluster: ClusterSpec {
                nodes,
                ..ClusterSpec::default()
            },
            packages: BTreeMap::new(),
        }
    }

    /// The simulated world of this fleet.
    pub fn build(&self, namespace: &str, seed: u64) -> Result<SimCluster, String> {
        let runner = ModelRunner::new(PackageModels(self.packages.clone()));
        let mut world = SimCluster::new(namespace, Box::new(runner), seed);
        crate::scenario::runner::add_objects(&mut world, &self.cluster)?;
        Ok(world)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_fleet_builds() {
        let world = Fleet::parse(DEMO_FLEET)
            .unwrap()
            .build("nodewright", 1)
            .unwrap();
        assert_eq!(world.nodes().len(), 24);
        assert_eq!(world.pdbs().len(), 1);
    }

    #[test]
    fn sim_nodes_are_the_gpu_nodes_sim_serve_makes() {
        let world = Fleet::gpu_nodes(3).build("nodewright", 1).unwrap();
        let names: Vec<&String> = world.nodes().keys().collect();
        assert_eq!(names, ["node-1", "node-2", "node-3"]);
        for (name, node) in world.nodes() {
            let labels = node.metadata.labels.clone().unwrap_or_default();
            for (key, value) in generated_node_labels(name) {
                assert_eq!(labels.get(&key), Some(&value), "{name} {key}");
            }
            assert_eq!(
                labels.get("nvidia.com/gpu.present").map(String::as_str),
                Some("true")
            );
        }
    }
}
