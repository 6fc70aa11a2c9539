//! Rollout progress for `run` and `demo`: one bar per NodeWright (nodes complete / selected,
//! with in-progress, erroring and blocked counts and the current batch), or plain periodic
//! lines when stderr is not a terminal or `--no-progress` is given.

use std::collections::BTreeMap;
use std::io::IsTerminal;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use nodewright_schema::{NodeWright, Status};

/// One NodeWright's progress figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Figures {
    /// Nodes complete.
    pub complete: u64,
    /// Nodes selected.
    pub selected: u64,
    /// One-line detail: status, counts, batch.
    pub detail: String,
}

/// Figures of a NodeWright from its status.
pub fn figures(nw: &NodeWright) -> Figures {
    let status = nw.status.clone().unwrap_or_default();
    let (complete, selected) = status
        .complete_nodes
        .as_deref()
        .and_then(|s| s.split_once('/'))
        .map(|(a, b)| (a.parse().unwrap_or(0), b.parse().unwrap_or(0)))
        .unwrap_or((0, 0));
    let mut counts: BTreeMap<Status, u64> = BTreeMap::new();
    for s in status.node_status.iter().flatten().map(|(_, s)| *s) {
        *counts.entry(s).or_default() += 1;
    }
    let mut parts = vec![status.status.unwrap_or(Status::Unknown).to_string()];
    for (s, label) in [
        (Status::InProgress, "in progress"),
        (Status::Erroring, "erroring"),
        (Status::Blocked, "blocked"),
        (Status::Waiting, "waiting"),
    ] {
        if let Some(n) = counts.get(&s).filter(|n| **n > 0) {
            parts.push(format!("{n} {label}"));
        }
    }
    let batches: Vec<String> = status
        .compartment_statuses
        .iter()
        .flatten()
        .filter_map(|(name, c)| {
            c.batch_state
                .as_ref()
                .map(|b| format!("{name} batch {}", b.current_batch.max(1)))
        })
        .collect();
    if !batches.is_empty() {
        parts.push(batches.join(", "));
    }
    Figures {
        complete,
        selected,
        detail: parts.join(" · "),
    }
}

/// Progress output.
pub enum Progress {
    /// Live bars.
    Bars {
        /// The bar group.
        multi: MultiProgress,
        /// One bar per NodeWright.
        bars: BTreeMap<String, ProgressBar>,
    },
    /// Plain lines, printed when something changed.
    Lines {
        /// Last printed figures per NodeWright.
        last: BTreeMap<String, Figures>,
    },
}

impl Progress {
    /// Bars when stderr is a terminal and progress is wanted; plain lines otherwise.
    pub fn new(wanted: bool) -> Self {
        if wanted && std::io::stderr().is_terminal() {
            Progress::Bars {
                multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
                bars: BTreeMap::new(),
            }
        } else {
            Progress::Lines {
                last: BTreeMap::new(),
            }
        }
    }

    /// Updates the display from the NodeWrights' status; `clock` prefixes plain lines.
    pub fn update(&mut self, nodewrights: &[std::sync::Arc<NodeWright>], clock: &str) {
        match self {
            Progress::Bars { multi, bars } => {
                for nw in nodewrights {
                    let f = figures(nw);
                    let bar = bars.entry(nw.name().to_string()).or_insert_with(|| {
                        let bar = multi.add(ProgressBar::new(f.selected.max(1)));
                        bar.set_style(
                            ProgressStyle::with_template(
                                "{prefix:>14} [{bar:30.green/white}] {pos:>3}/{len:<3} {msg}",
                            )
                            .unwrap_or_else(|_| ProgressStyle::default_bar())
                            .progress_chars("=> "),
                        );
                        bar.set_prefix(nw.name().to_string());
                        bar
                    });
                    bar.set_length(f.selected.max(1));
                    bar.set_position(f.complete);
                    bar.set_message(format!("{clock} {}", f.detail));
                }
            }
            Progress::Lines { last } => {
                for nw in nodewrights {
                    let f = figures(nw);
                    if last.get(nw.name()) != Some(&f) {
                        eprintln!(
                            "[{clock}] {}: {}/{} complete · {}",
                            nw.name(),
                            f.complete,
                            f.selected,
                            f.detail
                        );
                        last.insert(nw.name().to_string(), f);
                    }
                }
            }
        }
    }

    /// Prints a message without tearing the bars.
    pub fn println(&self, message: &str) {
        match self {
            Progress::Bars { multi, .. } => {
                let _ = multi.println(message);
            }
            Progress::Lines { .. } => eprintln!("{message}"),
        }
    }

    /// Leaves the bars on screen in their final state.
    pub fn finish(&self) {
        if let Progress::Bars { bars, .. } = self {
            for bar in bars.values() {
                bar.abandon();
            }
        }
    }
}
