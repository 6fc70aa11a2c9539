//! Interrupt candidates and coalescing (spec/operator.md §6.4 matched config interrupts,
//! §6.13 merged interrupt and its owner).

use nodewright_schema::{Interrupt, InterruptType, Package};

use nodewright_schema::glob::matches as glob_match;

/// Matched config interrupts (§6.4): for each changed key and each `configInterrupts` pattern
/// that matches it, the interrupt; duplicates (same type and same services, order-sensitive)
/// dropped. Keys are visited in the given order, patterns in map (key) order.
pub fn matched_config_interrupts(package: &Package, changed_keys: &[String]) -> Vec<Interrupt> {
    let mut out: Vec<Interrupt> = Vec::new();
    for key in changed_keys {
        for (pattern, interrupt) in package.config_interrupts() {
            if glob_match(pattern, key) && !out.contains(interrupt) {
                out.push(interrupt.clone());
            }
        }
    }
    out
}

/// Candidate interrupts of one package (§6.13): with pending config changes, its matched
/// config interrupts (possibly none, even when it has a spec interrupt); otherwise its spec
/// interrupt.
pub fn candidates(package: &Package, changed_keys: &[String]) -> Vec<Interrupt> {
    if changed_keys.is_empty() {
        package.interrupt.iter().cloned().collect()
    } else {
        matched_config_interrupts(package, changed_keys)
    }
}

/// The merged interrupt of a node and the package that owns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merged {
    /// The interrupt the node experiences.
    pub interrupt: Interrupt,
    /// The package whose interrupt Job runs it.
    pub owner: String,
}

/// Coalesces the candidates of the runnable packages of a node (§6.13). `packages` must be in
/// package-name order; each carries its candidates.
pub fn coalesce<'a, I>(packages: I) -> Option<Merged>
where
    I: IntoIterator<Item = (&'a str, Vec<Interrupt>)>,
{
    let mut result: Option<Merged> = None;
    for (name, candidates) in packages {
        for candidate in candidates {
            match result.as_mut() {
                None => {
                    let mut seed = candidate.clone();
                    // The seed is merged with itself: its list comes out sorted.
                    merge_services(&mut seed, &candidate);
                    result = Some(Merged {
                        interrupt: seed,
                        owner: name.to_string(),
                    });
                    if candidate.kind == InterruptType::Reboot {
                        return result;
                    }
                }
                Some(current) => {
                    if candidate.kind == InterruptType::Reboot {
                        return Some(Merged {
                            interrupt: candidate,
                            owner: name.to_string(),
                        });
                    }
                    if candidate.kind.rank() < current.interrupt.kind.rank() {
                        *current = Merged {
                            interrupt: candidate,
                            owner: name.to_string(),
                        };
                    } else if candidate.kind.rank() == current.interrupt.kind.rank()
                        && candidate.kind == InterruptType::Service
                    {
                        merge_services(&mut current.interrupt, &candidate);
                    }
                }
            }
        }
    }
    result
}

/// Appends the candidate's services not yet in the result, then sorts (§6.13 merge details):
/// duplicates already inside the result are kept.
fn merge_services(result: &mut Interrupt, candidate: &Interrupt) {
    let mut added = Vec::new();
    for service in &candidate.services {
        if !result.services.contains(service) && !added.contains(service) {
            added.push(service.clone());
        }
    }
    result.services.extend(added);
    result.services.sort();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn interrupt(kind: InterruptType, services: &[&str]) -> Interrupt {
        Interrupt {
            kind,
            services: services.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn reboot_wins_and_owner_is_the_first_highest_rank_by_name() {
        let merged = coalesce([
            ("a", vec![interrupt(InterruptType::Service, &["x"])]),
            ("b", vec![interrupt(InterruptType::Reboot, &[])]),
            ("c", vec![interrupt(InterruptType::Reboot, &[])]),
        ])
        .unwrap();
        assert_eq!(merged.owner, "b");
        assert_eq!(merged.interrupt.kind, InterruptType::Reboot);
    }

    #[test]
    fn services_merge_into_a_sorted_union() {
        let merged = coalesce([
            (
                "a",
                vec![interrupt(
                    InterruptType::Service,
                    &["kubelet", "containerd"],
                )],
            ),
            (
                "b",
                vec![interrupt(InterruptType::Service, &["containerd", "docker"])],
            ),
        ])
        .unwrap();
        assert_eq!(merged.owner, "a");
        assert_eq!(
            merged.interrupt.services,
            ["containerd", "docker", "kubelet"]
        );
    }

    #[test]
    fn duplicates_inside_one_list_are_kept_and_lower_rank_replaces() {
        let merged = coalesce([(
            "a",
            vec![interrupt(InterruptType::Service, &["b", "a", "b"])],
        )])
        .unwrap();
        assert_eq!(merged.interrupt.services, ["a", "b", "b"]);

        let merged = coalesce([
            ("a", vec![interrupt(InterruptType::Noop, &[])]),
            ("b", vec![interrupt(InterruptType::RestartAllServices, &[])]),
            ("c", vec![interrupt(InterruptType::RestartAllServices, &[])]),
            ("d", vec![interrupt(InterruptType::Service, &["x"])]),
        ])
        .unwrap();
        assert_eq!(merged.owner, "b");
        assert_eq!(merged.interrupt.kind, InterruptType::RestartAllServices);
    }

    #[test]
    fn nothing_to_merge_gives_none() {
        assert_eq!(coalesce([("a", vec![])]), None);
    }

    #[test]
    fn config_changes_use_matched_config_interrupts_only() {
        let package = Package {
            interrupt: Some(interrupt(InterruptType::Reboot, &[])),
            config_interrupts: Some(BTreeMap::from([
                (
                    "*.conf".to_string(),
                    interrupt(InterruptType::Service, &["a"]),
                ),
                (
                    "x.conf".to_string(),
                    interrupt(InterruptType::Service, &["a"]),
                ),
                ("y.txt".to_string(), interrupt(InterruptType::Noop, &[])),
            ])),
            ..Package::default()
        };
        assert_eq!(
            candidates(&package, &["x.conf".to_string()]),
            [interrupt(InterruptType::Service, &["a"])]
        );
        assert!(candidates(&package, &["other".to_string()]).is_empty());
        assert_eq!(
            candidates(&package, &[]),
            [interrupt(InterruptType::Reboot, &[])]
        );
    }
}
