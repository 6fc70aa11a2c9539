//! Evaluating `expect:` blocks (spec/scenarios.md §5) against the simulated world.

use std::collections::BTreeMap;

use crate::job::Job;
use k8s_openapi::api::core::v1::Node;
use nodewright_schema::node_state::NodeState;
use nodewright_schema::{NodeWright, keys, names};
use serde_yaml::{Mapping, Value};

use super::format::{EventExpect, Expect, HistoryExpect, JobsExpect, MetricExpect};
use super::matcher::{Mismatch, is_absent_word, matches, to_value};
use super::runner::Hooks;
use crate::settings::Settings;
use crate::sim::{SimCluster, job_address, jobs_is_finished};
use crate::snapshot::Memory;

pub use crate::engine::metrics::Sample;

/// Checks every section; the first mismatch wins.
pub fn check(
    expect: &Expect,
    world: &SimCluster,
    settings: &Settings,
    hooks: &Hooks,
) -> Result<(), Mismatch> {
    if let Some(nws) = &expect.nodewrights {
        for (name, e) in nws {
            check_nodewright(name, e, world.nodewrights().get(name), settings)?;
        }
    }
    if let Some(nodes) = &expect.nodes {
        for (name, e) in nodes {
            check_node(name, e, world.nodes().get(name).map(|n| &**n))?;
        }
    }
    if let Some(jobs) = &expect.jobs {
        check_jobs(jobs, world)?;
    }
    if let Some(cms) = &expect.config_maps {
        for (key, e) in cms {
            let (ns, name) = split_key(key, world.namespace());
            let cm = world
                .config_maps()
                .get(&(ns.clone(), name.clone()))
                .or_else(|| {
                    world
                        .config_maps()
                        .get(&(ns.clone(), names::safe_name(253, &[&name])))
                });
            matches(&format!("configMaps.{key}"), e, cm.map(to_value).as_ref())?;
        }
    }
    if let Some(pods) = &expect.pods {
        for (key, e) in pods {
            let (ns, name) = split_key(key, "default");
            let view = world.whole_pod(&(ns, name)).map(|pod| {
                let mut v = to_value(&*pod);
                if let Value::Mapping(m) = &mut v {
                    let st = pod.status.as_ref();
                    insert(
                        m,
                        "phase",
                        st.and_then(|s| s.phase.clone()).map(Value::String),
                    );
                    insert(
                        m,
                        "node",
                        pod.spec
                            .as_ref()
                            .and_then(|s| s.node_name.clone())
                            .map(Value::String),
                    );
                    insert(
                        m,
                        "terminating",
                        Some(Value::Bool(pod.metadata.deletion_timestamp.is_some())),
                    );
                    insert(
                        m,
                        "reason",
                        st.and_then(|s| s.reason.clone()).map(Value::String),
                    );
                    insert(m, "labels", pod.metadata.labels.as_ref().map(to_value));
                    insert(
                        m,
                        "conditions",
                        st.and_then(|s| s.conditions.as_ref())
                            .map(|c| by_type(c.iter().map(|c| (c.type_.clone(), to_value(c))))),
                    );
                }
                v
            });
            matches(&format!("pods.{key}"), e, view.as_ref())?;
        }
    }
    if let Some(events) = &expect.events {
        for e in &events.contains {
            check_event(e, world)?;
        }
    }
    if let Some(metrics) = &expect.metrics {
        check_metrics(metrics, world, settings, hooks)?;
    }
    if let Some(docs) = &expect.git_status {
        for (name, e) in docs {
            let doc = world
                .nodewrights()
                .get(name)
                .map(|nw| (hooks.git_status)(nw, settings));
            matches(&format!("gitStatus.{name}"), e, doc.as_ref())?;
        }
    }
    if let Some(history) = &expect.history {
        check_history(history, world)?;
    }
    Ok(())
}

fn split_key(key: &str, default_ns: &str) -> (String, String) {
    match key.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (default_ns.to_string(), key.to_string()),
    }
}

/// Inserts `key` into the actual view when the expectation `e` names it.
fn insert_wanted(m: &mut Mapping, e: &Mapping, key: &str, v: impl FnOnce() -> Option<Value>) {
    let key = Value::String(key.into());
    if e.contains_key(&key)
        && let Some(v) = v()
    {
        m.insert(key, v);
    }
}

fn insert(m: &mut Mapping, key: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(Value::String(key.into()), v);
    }
}

fn by_type(items: impl Iterator<Item = (String, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in items {
        m.insert(Value::String(k), v);
    }
    Value::Mapping(m)
}

/// Removes `key` (a list of keys that must be absent) from the expectation and checks it.
fn take_absent_keys(
    path: &str,
    e: &mut Mapping,
    key: &str,
    actual: Option<&BTreeMap<String, String>>,
) -> Result<(), Mismatch> {
    let Some(list) = e.remove(Value::String(key.into())) else {
        return Ok(());
    };
    let keys: Vec<String> = serde_yaml::from_value(list.clone()).map_err(|err| {
        Mismatch::note(
            &format!("{path}.{key}"),
            list.clone(),
            None,
            format!("expected a list of keys: {err}"),
        )
    })?;
    for k in keys {
        if let Some(v) = actual.and_then(|a| a.get(&k)) {
            return Err(Mismatch::note(
                &format!("{path}.{key}"),
                Value::String(k.clone()),
                Some(Value::String(v.clone())),
                format!("{k} should be absent"),
            ));
        }
    }
    Ok(())
}

fn expectation_map(path: &str, e: &Value) -> Result<Mapping, Mismatch> {
    match e {
        Value::Mapping(m) => Ok(m.clone()),
        other => Err(Mismatch::note(
            path,
            other.clone(),
            None,
            "expected a map of checks (or the word absent)",
        )),
    }
}

fn check_nodewright(
    name: &str,
    e: &Value,
    nw: Option<&NodeWright>,
    _settings: &Settings,
) -> Result<(), Mismatch> {
    let path = format!("nodewrights.{name}");
    if is_absent_word(e) {
        return matches(&path, e, nw.map(to_value).as_ref());
    }
    let mut e = expectation_map(&path, e)?;
    if let Some(deleted) = e.remove(Value::String("deleted".into())) {
        let gone = nw.is_none();
        matches(
            &format!("{path}.deleted"),
            &deleted,
            Some(&Value::Bool(gone)),
        )?;
    }
    take_absent_keys(
        &path,
        &mut e,
        "annotationsAbsent",
        nw.and_then(|n| n.metadata.annotations.as_ref()),
    )?;
    let Some(nw) = nw else {
        return if e.is_empty() {
            Ok(())
        } else {
            matches(&path, &Value::Mapping(e), None)
        };
    };
    // Only what the expectation names is built: a NodeWright's status holds an entry per
    // selected node, and an `until` step checks it after every pass.
    let fallback;
    let status = match &nw.status {
        Some(status) => status,
        None => {
            fallback = Default::default();
            &fallback
        }
    };
    let mut view = Mapping::new();
    insert_wanted(&mut view, &e, "status", || {
        status.status.map(|s| Value::String(s.as_str().into()))
    });
    insert_wanted(&mut view, &e, "nodeStatus", || {
        status.node_status.as_ref().map(|m| {
            by_type(
                m.iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.as_str().into()))),
            )
        })
    });
    let conditions = status.conditions.as_deref().unwrap_or_default();
    insert_wanted(&mut view, &e, "conditions", || {
        Some(by_type(
            conditions.iter().map(|c| (c.type_.clone(), to_value(c))),
        ))
    });
    insert_wanted(&mut view, &e, "readyMessage", || {
        conditions
            .iter()
            .find(|c| c.type_ == keys::condition::READY)
            .map(|c| Value::String(c.message.clone()))
    });
    insert_wanted(&mut view, &e, "raw", || Some(to_value(&status)));
    insert_wanted(&mut view, &e, "annotations", || {
        Some(to_value(
            &nw.metadata.annotations.clone().unwrap_or_default(),
        ))
    });
    insert_wanted(&mut view, &e, "labels", || {
        Some(to_value(&nw.metadata.labels.clone().unwrap_or_default()))
    });
    insert_wanted(&mut view, &e, "generation", || {
        nw.metadata.generation.map(|g| Value::Number(g.into()))
    });
    insert_wanted(&mut view, &e, "finalizers", || {
        Some(to_value(
            &nw.metadata.finalizers.clone().unwrap_or_default(),
        ))
    });
    insert_wanted(&mut view, &e, "deleting", || {
        Some(Value::Bool(nw.metadata.deletion_timestamp.is_some()))
    });
    insert_wanted(&mut view, &e, "spec", || Some(to_value(&nw.spec)));
    matches(&path, &Value::Mapping(e), Some(&Value::Mapping(view)))
}

fn check_node(name: &str, e: &Value, node: Option<&Node>) -> Result<(), Mismatch> {
    let path = format!("nodes.{name}");
    if is_absent_word(e) {
        return matches(&path, e, node.map(to_value).as_ref());
    }
    let mut e = expectation_map(&path, e)?;
    let Some(node) = node else {
        return matches(&path, &Value::Mapping(e), None);
    };
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    take_absent_keys(&path, &mut e, "annotationsAbsent", Some(&annotations))?;
    take_absent_keys(&path, &mut e, "labelsAbsent", Some(&labels))?;
    let taints = crate::sim::node_taints(node);
    if let Some(t) = e.remove(Value::String("taints".into())) {
        let spec: BTreeMap<String, Vec<String>> =
            serde_yaml::from_value(t.clone()).map_err(|err| {
                Mismatch::note(
                    &format!("{path}.taints"),
                    t.clone(),
                    None,
                    format!("expected {{present: [key], absent: [key]}}: {err}"),
                )
            })?;
        let actual = Value::Sequence(
            taints
                .iter()
                .map(|t| Value::String(format!("{}:{}", t.key, t.effect)))
                .collect(),
        );
        for key in spec.get("present").into_iter().flatten() {
            if !taints.iter().any(|t| &t.key == key) {
                return Err(Mismatch::note(
                    &format!("{path}.taints.present"),
                    Value::String(key.clone()),
                    Some(actual),
                    format!("no taint with key {key}"),
                ));
            }
        }
        for key in spec.get("absent").into_iter().flatten() {
            if taints.iter().any(|t| &t.key == key) {
                return Err(Mismatch::note(
                    &format!("{path}.taints.absent"),
                    Value::String(key.clone()),
                    Some(actual),
                    format!("taint {key} should be absent"),
                ));
            }
        }
        if let Some(other) = spec.keys().find(|k| *k != "present" && *k != "absent") {
            return Err(Mismatch::note(
                &format!("{path}.taints.{other}"),
                t.clone(),
                None,
                "taints takes present and absent",
            ));
        }
    }
    let mut view = Mapping::new();
    insert(
        &mut view,
        "unschedulable",
        Some(Value::Bool(
            node.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
        )),
    );
    insert(&mut view, "labels", Some(to_value(&labels)));
    insert(&mut view, "annotations", Some(to_value(&annotations)));
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    insert(
        &mut view,
        "conditions",
        Some(by_type(
            conditions.iter().map(|c| (c.type_.clone(), to_value(c))),
        )),
    );
    insert(
        &mut view,
        "ready",
        Some(Value::Bool(crate::sim::node_is_ready(node))),
    );
    insert(
        &mut view,
        "bootId",
        Some(Value::String(crate::sim::node_boot_id(node).to_string())),
    );
    let prefix = format!("{}{}", keys::PREFIX, keys::node_key::NODE_STATE);
    let mut states = Mapping::new();
    for (k, v) in &annotations {
        if let Some(nw) = k.strip_prefix(&prefix) {
            let parsed = NodeState::parse(v)
                .map(|s| to_value(&s))
                .unwrap_or_else(|_| Value::String(v.clone()));
            states.insert(Value::String(nw.to_string()), parsed);
        }
    }
    insert(&mut view, "nodeState", Some(Value::Mapping(states)));
    matches(&path, &Value::Mapping(e), Some(&Value::Mapping(view)))
}

fn reconciler_jobs(world: &SimCluster) -> Vec<&Job> {
    world
        .jobs()
        .values()
        .filter(|j| {
            j.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(keys::JOB_LABEL_NAME))
        })
        .map(|j| &**j)
        .collect()
}

fn check_jobs(e: &JobsExpect, world: &SimCluster) -> Result<(), Mismatch> {
    let jobs = reconciler_jobs(world);
    if let Some(count) = e.count {
        let names: Vec<Value> = jobs
            .iter()
            .filter_map(|j| job_address(j))
            .map(Value::String)
            .collect();
        if names.len() != count {
            return Err(Mismatch::note(
                "jobs.count",
                Value::Number(count.into()),
                Some(Value::Sequence(names.clone())),
                format!("{} Jobs exist", names.len()),
            ));
        }
    }
    if let Some(active) = e.active {
        let names: Vec<Value> = jobs
            .iter()
            .filter(|j| !jobs_is_finished(j))
            .filter_map(|j| job_address(j))
            .map(Value::String)
            .collect();
        if names.len() != active {
            return Err(Mismatch::note(
                "jobs.active",
                Value::Number(active.into()),
                Some(Value::Sequence(names.clone())),
                format!("{} Jobs are not finished", names.len()),
            ));
        }
    }
    let by_address = |address: &str| -> Option<&Job> {
        let mut candidates: Vec<&Job> = jobs
            .iter()
            .copied()
            .filter(|j| job_address(j).as_deref() == Some(address))
            .collect();
        // Prefer the unfinished Job, then the newest.
        candidates.sort_by_key(|j| {
            (
                !jobs_is_finished(j),
                j.metadata.creation_timestamp.clone().map(|t| t.0),
            )
        });
        candidates.last().copied()
    };
    for (address, expected) in &e.items {
        matches(
            &format!("jobs.items.{address}"),
            expected,
            by_address(address)
                .and_then(|j| world.whole_job(j.metadata.name.as_deref().unwrap_or_default()))
                .map(|j| to_value(&*j))
                .as_ref(),
        )?;
    }
    for address in &e.absent {
        if let Some(job) = by_address(address) {
            return Err(Mismatch::note(
                &format!("jobs.absent.{address}"),
                Value::String("absent".into()),
                Some(Value::String(job.metadata.name.clone().unwrap_or_default())),
                "a Job exists for this address",
            ));
        }
    }
    Ok(())
}

fn check_event(e: &EventExpect, world: &SimCluster) -> Result<(), Mismatch> {
    let found = world.events().iter().any(|ev| {
        e.reason.as_ref().is_none_or(|r| *r == ev.reason)
            && e.object.as_ref().is_none_or(|o| *o == ev.object)
            && e.type_.as_ref().is_none_or(|t| *t == ev.type_)
            && e.message
                .as_ref()
                .is_none_or(|m| ev.message.contains(m.as_str()))
    });
    if found {
        return Ok(());
    }
    let recorded: Vec<Value> = world
        .events()
        .iter()
        .rev()
        .take(10)
        .map(|ev| {
            Value::String(format!(
                "{} {} {}/{}: {}",
                ev.type_, ev.reason, ev.object_kind, ev.object, ev.message
            ))
        })
        .collect();
    Err(Mismatch::note(
        "events.contains",
        to_value(e),
        Some(Value::Sequence(recorded)),
        "no recorded event matches (showing the last 10)",
    ))
}

/// Parses `name{k="v",…}` into a name and labels.
pub fn parse_series(series: &str) -> Result<(String, BTreeMap<String, String>), String> {
    let Some((name, rest)) = series.split_once('{') else {
        return Ok((series.trim().to_string(), BTreeMap::new()));
    };
    let body = rest
        .strip_suffix('}')
        .ok_or_else(|| format!("series {series:?} lacks a closing brace"))?;
    let mut labels = BTreeMap::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once('=')
            .ok_or_else(|| format!("series {series:?}: label without '='"))?;
        let after = after
            .trim_start()
            .strip_prefix('"')
            .ok_or_else(|| format!("series {series:?}: label values are quoted"))?;
        let end = after
            .find('"')
            .ok_or_else(|| format!("series {series:?}: unterminated label value"))?;
        labels.insert(key.trim().to_string(), after[..end].to_string());
        rest = after[end + 1..]
            .trim_start()
            .trim_start_matches(',')
            .trim_start();
    }
    Ok((name.trim().to_string(), labels))
}

fn check_metrics(
    metrics: &BTreeMap<String, MetricExpect>,
    world: &SimCluster,
    settings: &Settings,
    hooks: &Hooks,
) -> Result<(), Mismatch> {
    let Some(source) = hooks.metrics else {
        let (series, value) = metrics
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), expected_value(v)))
            .unwrap_or_default();
        return Err(Mismatch::note(
            &format!("metrics.{series}"),
            value,
            None,
            "no metrics source is wired into the runner yet (Hooks::metrics)",
        ));
    };
    let samples = source(&world.snapshot(Memory::default()), settings);
    for (series, expected) in metrics {
        let path = format!("metrics.{series}");
        let (name, labels) = parse_series(series)
            .map_err(|e| Mismatch::note(&path, expected_value(expected), None, e))?;
        let actual = samples
            .iter()
            .find(|s| s.name == name && s.labels == labels)
            .map(|s| s.value);
        match (expected, actual) {
            (MetricExpect::Absent, None) => {}
            (MetricExpect::Absent, Some(v)) => {
                return Err(Mismatch::note(
                    &path,
                    expected_value(expected),
                    Some(to_value(&v)),
                    "the series is exported",
                ));
            }
            // An absent series matches 0 (spec/scenarios.md §5).
            (MetricExpect::Value(want), got) if got.unwrap_or(0.0) == *want => {}
            (MetricExpect::Value(_), got) => {
                return Err(Mismatch::note(
                    &path,
                    expected_value(expected),
                    got.map(|v| to_value(&v)),
                    "an absent series reads 0",
                ));
            }
        }
    }
    Ok(())
}

/// How an expected metric value is printed in a mismatch.
fn expected_value(expected: &MetricExpect) -> Value {
    match expected {
        MetricExpect::Value(v) => to_value(v),
        MetricExpect::Absent => Value::String("absent".into()),
    }
}

fn check_history(e: &HistoryExpect, world: &SimCluster) -> Result<(), Mismatch> {
    let history = world.history();
    let tail = || {
        Value::Sequence(
            history
                .entries()
                .iter()
                .rev()
                .take(30)
                .rev()
                .map(|e| Value::String(e.line.clone()))
                .collect(),
        )
    };
    let mut last: Option<(usize, &str)> = None;
    for line in &e.order {
        let Some(at) = history.first(line) else {
            return Err(Mismatch::note(
                "history.order",
                Value::String(line.clone()),
                Some(tail()),
                format!("`{line}` never happened"),
            ));
        };
        if let Some((prev, prev_line)) = last
            && at < prev
        {
            return Err(Mismatch::note(
                "history.order",
                to_value(&e.order),
                Some(tail()),
                format!("`{line}` first happened before `{prev_line}`"),
            ));
        }
        last = Some((at, line));
    }
    for line in &e.never {
        if history.first(line).is_some() {
            return Err(Mismatch::note(
                "history.never",
                Value::String(line.clone()),
                Some(tail()),
                format!("`{line}` happened"),
            ));
        }
    }
    for (line, count) in &e.count {
        let actual = history.count(line);
        if actual != *count {
            return Err(Mismatch::note(
                &format!("history.count.{line}"),
                Value::Number((*count).into()),
                Some(Value::Number(actual.into())),
                "occurrences",
            ));
        }
    }
    Ok(())
}

/// The default status document of a NodeWright until status write-back lands: its name,
/// generation, source commit and CR status.
pub fn default_git_status(nw: &NodeWright, _settings: &Settings) -> Value {
    let mut doc = Mapping::new();
    insert(
        &mut doc,
        "name",
        nw.metadata.name.clone().map(Value::String),
    );
    insert(
        &mut doc,
        "generation",
        nw.metadata.generation.map(|g| Value::Number(g.into())),
    );
    insert(
        &mut doc,
        "sourceCommit",
        nw.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::SOURCE_COMMIT))
            .cloned()
            .map(Value::String),
    );
    if let Value::Mapping(status) = to_value(&nw.status.clone().unwrap_or_default()) {
        doc.extend(status);
    }
    Value::Mapping(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_keys_parse_into_name_and_labels() {
        let (name, labels) = parse_series(
            r#"nodewright_node_status_count{nodewright_name="tuning",status="complete"}"#,
        )
        .unwrap();
        assert_eq!(name, "nodewright_node_status_count");
        assert_eq!(labels["status"], "complete");
        assert_eq!(labels.len(), 2);
        assert!(parse_series("x{a=1}").is_err());
    }
}
