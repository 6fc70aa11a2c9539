//! `meta.k8s.io/v1` Table responses (`Accept: application/json;as=Table;…`), so `kubectl get`
//! prints useful columns: status, node, priority and an age on the simulator's clock.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::resources::{self, Rid};

fn text(object: &Value, pointer: &str) -> String {
    match object.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// A kubectl-style age (`45s`, `12m`, `3h`, `5d`).
fn age(object: &Value, now: Timestamp) -> String {
    let Ok(created) = text(object, "/metadata/creationTimestamp").parse::<Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = now.duration_since(created).as_secs();
    match secs {
        s if s < 0 => "<invalid>".into(),
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn condition_true(object: &Value, type_: &str) -> bool {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(type_)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// The extra columns of a resource (after NAME, before AGE) and their cells for one object.
fn columns(rid: Rid) -> &'static [&'static str] {
    match rid {
        resources::NODES => &["Status"],
        resources::PODS => &["Status", "Node"],
        resources::JOBS => &["Status"],
        resources::NODEWRIGHTS => &["Status", "Priority"],
        _ => &[],
    }
}

fn cells(rid: Rid, object: &Value) -> Vec<String> {
    match rid {
        resources::NODES => {
            let mut status = if condition_true(object, "Ready") {
                "Ready".to_string()
            } else {
                "NotReady".to_string()
            };
            if object.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
                status.push_str(",SchedulingDisabled");
            }
            vec![status]
        }
        resources::PODS => vec![
            text(object, "/status/phase"),
            text(object, "/spec/nodeName"),
        ],
        resources::JOBS => {
            let status = if condition_true(object, "Complete") {
                "Complete"
            } else if condition_true(object, "Failed") {
                "Failed"
            } else if object.pointer("/spec/suspend") == Some(&Value::Bool(true)) {
                "Suspended"
            } else {
                "Running"
            };
            vec![status.to_string()]
        }
        resources::NODEWRIGHTS => vec![
            text(object, "/status/status"),
            text(object, "/spec/priority"),
        ],
        _ => vec![],
    }
}

/// The Table for `objects` of one resource.
pub fn table(rid: Rid, objects: &[&Value], resource_version: u64, now: Timestamp) -> Value {
    let mut definitions = vec![json!({"name": "Name", "type": "string", "format": "name",
                                      "description": "Name", "priority": 0})];
    for column in columns(rid) {
        definitions.push(json!({"name": column, "type": "string", "format": "",
                                "description": column, "priority": 0}));
    }
    definitions.push(json!({"name": "Age", "type": "string", "format": "",
                            "description": "Age", "priority": 0}));
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let mut row = vec![json!(text(object, "/metadata/name"))];
            row.extend(cells(rid, object).into_iter().map(Value::String));
            row.push(json!(age(object, now)));
            json!({
                "cells": row,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": object.get("metadata").cloned().unwrap_or(Value::Null),
                },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// Whether the client asked for a Table.
pub fn wanted(accept: &str) -> bool {
    accept.contains("as=Table")
}
