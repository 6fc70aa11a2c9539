//! Simulated fleets for `run` (no cluster configured) and `demo`: a scenario-format
//! description (`cluster:` and `packages:` blocks, spec/scenarios.md §2–§3) built into a
//! [`SimCluster`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::scenario::format::ClusterSpec;
use crate::sim::{ModelRunner, PackageModel, PackageModels, SimCluster};

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

    /// `count` plain nodes named `node-0 …`, all packages succeeding with default durations.
    pub fn plain(count: usize) -> Fleet {
        Fleet::parse(&format!(
            "cluster:\n  nodes:\n    - generate: {{count: {count}, namePrefix: node-}}\n"
        ))
        .unwrap_or(Fleet {
            cluster: ClusterSpec::default(),
            packages: BTreeMap::new(),
        })
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
        assert_eq!(
            Fleet::plain(3)
                .build("nodewright", 1)
                .unwrap()
                .nodes()
                .len(),
            3
        );
    }
}
