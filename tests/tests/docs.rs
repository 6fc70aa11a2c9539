//! The user documentation: every relative link in `docs/`, `ci/README.md` and the README points
//! at a file that exists, and every page of `docs/` is reachable from another page or the README.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace root")
        .to_path_buf()
}

fn pages() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    out.push(root().join("ci/README.md"));
    out.push(root().join("README.md"));
    out.sort();
    out
}

/// Targets of Markdown links `[text](target)` that are not URLs or pure anchors.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        if !target.contains("://") && !target.starts_with('#') && !target.starts_with("mailto:") {
            out.push(target.split('#').next().unwrap_or("").to_string());
        }
    }
    out
}

#[test]
fn relative_links_resolve() {
    for page in pages() {
        let Ok(text) = std::fs::read_to_string(&page) else {
            continue;
        };
        let dir = page.parent().unwrap();
        for link in relative_links(&text) {
            assert!(
                dir.join(&link).exists(),
                "{}: link to {link} does not resolve",
                page.display()
            );
        }
    }
}

#[test]
fn every_guide_is_linked_from_somewhere() {
    let mut linked = BTreeSet::new();
    for page in pages() {
        let Ok(text) = std::fs::read_to_string(&page) else {
            continue;
        };
        let dir = page.parent().unwrap();
        for link in relative_links(&text) {
            if let Ok(p) = dir.join(&link).canonicalize()
                && p != page.canonicalize().unwrap()
            {
                linked.insert(p);
            }
        }
    }
    for page in pages() {
        let name = page.file_name().unwrap().to_string_lossy().to_string();
        if name == "README.md" || name == "decisions.md" || name == "agent.md" {
            continue;
        }
        assert!(
            linked.contains(&page.canonicalize().unwrap()),
            "docs/{name} is not linked from any other page"
        );
    }
}
