//! `nodewright diff` end to end: the real binary on a real repository.

mod common;

use std::process::Command;

use common::{WorkRepo, nodewright};

const BASE_PACKAGES: &str = "    driver:
      version: 1.0.0
      image: nvcr.io/nvidia/driver
    tuning:
      version: 2.0.0
      image: nvcr.io/nvidia/tuning
      configMap:
        sysctl.conf: |
          vm.swappiness=10
        motd.txt: hello
      configInterrupts:
        \"*.conf\":
          type: service
          services: [containerd]
    agent:
      version: 3.0.0
      image: nvcr.io/nvidia/agent
      uninstall:
        enabled: true
";

const HEAD_PACKAGES: &str = "    driver:
      version: 1.1.0
      image: nvcr.io/nvidia/driver
    tuning:
      version: 2.0.0
      image: nvcr.io/nvidia/tuning
      configMap:
        sysctl.conf: |
          vm.swappiness=60
        motd.txt: hello
      configInterrupts:
        \"*.conf\":
          type: service
          services: [containerd]
    agent:
      version: 2.9.0
      image: nvcr.io/nvidia/agent
      uninstall:
        enabled: true
    kernel:
      version: 6.8.0
      image: nvcr.io/nvidia/kernel
      interrupt:
        type: reboot
";

fn fixture() -> (tempfile::TempDir, String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("fleet"));
    work.write("clusters/prod/gpu.yaml", &nodewright("gpu", BASE_PACKAGES));
    work.write("README.md", "not a manifest\n");
    let base = work.commit("base");
    work.write("clusters/prod/gpu.yaml", &nodewright("gpu", HEAD_PACKAGES));
    let head = work.commit("head");
    (tmp, base, head)
}

fn nodewright_bin(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(args)
        .output()
        .expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn row<'a>(markdown: &'a str, package: &str, label: &str) -> &'a str {
    markdown
        .lines()
        .find(|l| l.starts_with(&format!("| `{package}` |")) && l.contains(&format!("**{label}**")))
        .unwrap_or_else(|| panic!("no {label} row for {package} in:\n{markdown}"))
}

#[test]
fn markdown_shows_every_class_and_refuses_the_downgrade() {
    let (tmp, base, head) = fixture();
    let repo = tmp.path().join("fleet");
    let (code, md, err) = nodewright_bin(&[
        "diff",
        "--repo",
        repo.to_str().unwrap(),
        "--base",
        &base,
        "--head",
        &head,
        "--path",
        "clusters/prod",
        "--format",
        "markdown",
    ]);
    assert_eq!(
        code, 3,
        "exit 3 because of the downgrade; stderr: {err}\n{md}"
    );

    let verdict = md.lines().next().unwrap();
    assert!(verdict.starts_with("❌"), "{verdict}");
    assert!(
        verdict.contains("INVALID") && verdict.contains(&head[..12]),
        "{verdict}"
    );

    let upgrade = row(&md, "driver", "upgrade");
    assert!(upgrade.contains("1.0.0 → 1.1.0"), "{upgrade}");
    let config = row(&md, "tuning", "config");
    assert!(config.contains("sysctl.conf"), "{config}");
    assert!(
        config.contains("service (containerd)"),
        "interrupt from configInterrupts: {config}"
    );
    assert!(
        !config.contains("motd.txt"),
        "unchanged key listed: {config}"
    );
    let install = row(&md, "kernel", "install");
    assert!(install.contains("| `reboot` |"), "{install}");
    let downgrade = row(&md, "agent", "downgrade");
    assert!(
        downgrade.contains("❌") && downgrade.contains("3.0.0 → 2.9.0"),
        "{downgrade}"
    );
    assert!(
        downgrade.contains("uninstall.apply=true"),
        "explains the fix: {downgrade}"
    );

    // The problem table names the file and line of the version field.
    let problem = md
        .lines()
        .find(|l| l.contains("downgrade not allowed"))
        .expect("downgrade problem listed");
    assert!(problem.contains("clusters/prod/gpu.yaml:"), "{problem}");

    // A collapsible manifest diff with the version change.
    assert!(md.contains("<details><summary>Manifest diff: NodeWright <code>gpu</code>"));
    assert!(
        md.contains("-      version: 1.0.0") && md.contains("+      version: 1.1.0"),
        "{md}"
    );
}

#[test]
fn json_carries_the_same_facts() {
    let (tmp, base, head) = fixture();
    let repo = tmp.path().join("fleet");
    let (code, out, err) = nodewright_bin(&[
        "diff",
        "--repo",
        repo.to_str().unwrap(),
        "--base",
        &base,
        "--head",
        &head,
        "--path",
        "clusters/prod",
        "--format",
        "json",
    ]);
    assert_eq!(code, 3, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["valid"], false);
    assert_eq!(doc["exit_code"], 3);
    assert_eq!(doc["base"], base.as_str());
    assert_eq!(doc["head"], head.as_str());
    let nw = &doc["nodewrights"][0];
    assert_eq!(nw["name"], "gpu");
    assert_eq!(nw["change"], "changed");
    let classes = |pkg: &str| -> Vec<serde_json::Value> {
        nw["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["package"] == pkg)
            .unwrap_or_else(|| panic!("{pkg} missing"))["changes"]
            .as_array()
            .unwrap()
            .clone()
    };
    let up = &classes("driver")[0];
    assert_eq!(
        (up["class"].as_str(), up["from"].as_str(), up["to"].as_str()),
        (Some("upgrade"), Some("1.0.0"), Some("1.1.0"))
    );
    let cfg = &classes("tuning")[0];
    assert_eq!(cfg["class"], "config");
    assert_eq!(cfg["changed"], serde_json::json!(["sysctl.conf"]));
    assert_eq!(cfg["interrupts"][0]["pattern"], "*.conf");
    assert_eq!(cfg["interrupts"][0]["interrupt"]["type"], "service");
    let inst = &classes("kernel")[0];
    assert_eq!(inst["class"], "install");
    assert_eq!(inst["interrupt"]["type"], "reboot");
    let down = &classes("agent")[0];
    assert_eq!(down["class"], "downgrade");
    assert_eq!(down["allowed"], false);
    assert_eq!(down["error"], true);
    assert!(doc["problems"].as_array().unwrap().iter().any(|p| {
        p["rule"] == "uninstall-downgrade-apply-first"
            || p["message"]
                .as_str()
                .unwrap_or("")
                .contains("downgrade not allowed")
    }));
    assert_eq!(doc["summary"]["interrupts"]["reboot"], 1);
    assert_eq!(doc["summary"]["interrupts"]["service"], 1);
}

#[test]
fn a_valid_change_exits_zero_and_text_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("fleet"));
    work.write(
        "gpu.yaml",
        &nodewright(
            "gpu",
            "    driver:\n      version: 1.0.0\n      image: nvcr.io/nvidia/driver\n",
        ),
    );
    let base = work.commit("base");
    work.write(
        "gpu.yaml",
        &nodewright(
            "gpu",
            "    driver:\n      version: 1.2.0\n      image: nvcr.io/nvidia/driver\n",
        ),
    );
    work.commit("head");
    let (code, out, err) = nodewright_bin(&[
        "diff",
        "--repo",
        work.dir.to_str().unwrap(),
        "--base",
        &base,
        "--head",
        "main",
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(out.lines().next().unwrap().contains("is valid"), "{out}");
    assert!(out.contains("driver 1.0.0 → 1.2.0 [upgrade]"), "{out}");
}

#[test]
fn unknown_revisions_are_usage_errors() {
    let (tmp, base, _) = fixture();
    let repo = tmp.path().join("fleet");
    let (code, _, err) = nodewright_bin(&[
        "diff",
        "--repo",
        repo.to_str().unwrap(),
        "--base",
        &base,
        "--head",
        "nope",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn validate_checks_a_commit_of_a_repository() {
    let (tmp, base, head) = fixture();
    let repo = tmp.path().join("fleet");
    let (code, out, err) =
        nodewright_bin(&["validate", "--repo", repo.to_str().unwrap(), "--rev", &base]);
    assert_eq!(code, 0, "{out}{err}");
    // Head alone (no previous state) is valid too: the downgrade is only refused as an update.
    let (code, _, _) = nodewright_bin(&[
        "validate",
        "--repo",
        repo.to_str().unwrap(),
        "--rev",
        &head,
        "--path",
        "clusters",
    ]);
    assert_eq!(code, 0);

    let work = WorkRepo { dir: repo.clone() };
    work.write(
        "clusters/prod/bad.yaml",
        &nodewright(
            "bad",
            "    Bad_Name:\n      version: x\n      image: nvcr.io/a:tag\n",
        ),
    );
    let bad = work.commit("bad");
    let (code, out, _) =
        nodewright_bin(&["validate", "--repo", repo.to_str().unwrap(), "--rev", &bad]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("clusters/prod/bad.yaml:"), "{out}");
    // Files under another root are not read.
    let (code, _, _) = nodewright_bin(&[
        "validate",
        "--repo",
        repo.to_str().unwrap(),
        "--rev",
        &bad,
        "--path",
        "elsewhere",
    ]);
    assert_eq!(code, 0);
}

#[test]
fn a_remote_repository_is_mirrored_for_the_diff() {
    let (tmp, base, head) = fixture();
    let bare = tmp.path().join("remote.git");
    common::git(
        tmp.path(),
        &[
            "clone",
            "-q",
            "--bare",
            tmp.path().join("fleet").to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let cache = tmp.path().join("cache");
    let url = format!("file://{}", bare.display());
    let (code, out, err) = nodewright_bin(&[
        "diff",
        "--repo",
        &url,
        "--cache-dir",
        cache.to_str().unwrap(),
        "--base",
        &base,
        "--head",
        &head,
        "--path",
        "clusters/prod",
        "--format",
        "json",
    ]);
    assert_eq!(code, 3, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["head"], head.as_str());
    assert!(
        std::fs::read_dir(&cache).unwrap().next().is_some(),
        "mirror created in the cache dir"
    );
}

/// Issue 28 item 7: removing an uninstall-enabled package that Git never asked to uninstall is
/// accepted by the cluster when no node holds it (§3.2 rule 1 reads the cluster's status), so
/// the diff warns, says what the cluster will check, and exits 0.
#[test]
fn removing_an_uninstall_enabled_package_warns_and_exits_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("fleet"));
    work.write("gpu.yaml", &nodewright("gpu", BASE_PACKAGES));
    let base = work.commit("base");
    let without_agent = BASE_PACKAGES
        .split("    agent:")
        .next()
        .expect("the agent package is the last one");
    work.write("gpu.yaml", &nodewright("gpu", without_agent));
    let head = work.commit("head");
    let (code, text, err) = nodewright_bin(&[
        "diff",
        "--repo",
        work.dir.to_str().unwrap(),
        "--base",
        &base,
        "--head",
        &head,
    ]);
    assert_eq!(code, 0, "stderr: {err}\n{text}");
    assert!(
        text.contains("no node's state in the NodeWright's status holds agent|3.0.0"),
        "{text}"
    );
    assert!(text.contains("set uninstall.apply=true"), "{text}");
}

#[test]
fn a_maintenance_window_change_is_shown_with_what_it_does() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("fleet"));
    let manifest = |annotations: &str| {
        format!(
            "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: gpu\n{annotations}spec:\n  packages:\n    driver:\n      version: 1.0.0\n      image: nvcr.io/nvidia/driver\n"
        )
    };
    work.write("gpu.yaml", &manifest(""));
    let base = work.commit("base");
    work.write(
        "gpu.yaml",
        &manifest(
            "  annotations:\n    gitops.nodewright.nvidia.com/maintenance-windows: \"Sat,Sun 02:00-06:00\"\n    gitops.nodewright.nvidia.com/maintenance-timezone: Europe/Berlin\n",
        ),
    );
    work.commit("head");
    let (code, out, err) = nodewright_bin(&[
        "diff",
        "--repo",
        work.dir.to_str().unwrap(),
        "--base",
        &base,
        "--head",
        "main",
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(out.contains("maintenance-windows"), "{out}");
    assert!(out.contains("Sat,Sun 02:00-06:00"), "{out}");
    assert!(
        out.contains("new nodes are admitted only while a window is open"),
        "{out}"
    );
    assert!(out.contains("Europe/Berlin"), "{out}");
}

fn gated(version: &str, approved: Option<&str>) -> String {
    let approved = approved
        .map(|a| format!("    gitops.nodewright.nvidia.com/approved-batches: \"{a}\"\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: gpu\n  annotations:\n    gitops.nodewright.nvidia.com/approval-required: \"*\"\n{approved}spec:\n  deploymentPolicy: one-by-one\n  nodeSelectors:\n    matchLabels:\n      role: gpu\n  packages:\n    driver:\n      version: {version}\n      image: nvcr.io/nvidia/driver\n"
    )
}

const ONE_BY_ONE: &str = "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: DeploymentPolicy\nmetadata:\n  name: one-by-one\nspec:\n  default:\n    budget: {count: 1}\n    strategy: {fixed: {initialBatch: 1}}\n";

#[test]
fn an_approval_edit_is_its_own_change_class_and_the_timeline_shows_where_it_waits() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("fleet"));
    work.write("policy.yaml", ONE_BY_ONE);
    work.write("gpu.yaml", &gated("1.0.0", None));
    let base = work.commit("base");
    work.write("gpu.yaml", &gated("1.0.0", Some("__default__=3")));
    let approval = work.commit("approve every batch");
    let (code, out, err) = nodewright_bin(&[
        "diff",
        "--repo",
        work.dir.to_str().unwrap(),
        "--base",
        &base,
        "--head",
        &approval,
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(out.contains("(1 approval)"), "{out}");
    assert!(
        out.contains("approves __default__ batch 3 and the batches before it"),
        "{out}"
    );

    // A version bump with the approval left in place: the timeline runs batch 1 and waits,
    // because the approval was given for the rollout before.
    work.write("gpu.yaml", &gated("1.1.0", Some("__default__=3")));
    let bump = work.commit("driver 1.1.0");
    let (code, out, err) = nodewright_bin(&[
        "diff",
        "--repo",
        work.dir.to_str().unwrap(),
        "--base",
        &approval,
        "--head",
        &bump,
        "--simulate",
        "--nodes",
        "3",
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(out.contains("waits for approval after about"), "{out}");
    assert!(
        out.contains("gpu waits at +")
            && out.contains(
                "compartment __default__: batch 2 waits for approval (1 nodes complete, 0 failed); approve with gitops.nodewright.nvidia.com/approved-batches: __default__=2"
            ),
        "{out}"
    );
}
