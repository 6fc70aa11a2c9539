//! Which snapshot a list shows and where its page starts: `resourceVersion` with
//! `resourceVersionMatch`, `limit` and `continue`, read and refused as kube-apiserver does.
//! A continue token carries the resourceVersion of the first page, so every page of one list
//! shows the same snapshot; it expires (410) once the watch log no longer reaches back to it,
//! as tokens expire with etcd compaction.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::error::ApiError;
use super::world::ObjKey;

/// What the apiserver answers a continue token older than its compaction.
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";
/// What the apiserver answers an exact list older than its compaction.
const EXPIRED_LIST: &str = "The resourceVersion for the provided list is too old.";

/// Which resourceVersion a list asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Version {
    /// `""` (the newest) or `"0"` (any): the current state.
    Any,
    /// `resourceVersionMatch=Exact`: exactly that snapshot.
    Exact(u64),
    /// A resourceVersion with `NotOlderThan` (or no match): the current state, which must
    /// have reached it.
    NotOlderThan(u64),
}

/// The snapshot and page a list request asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct ListRequest {
    /// The resourceVersion asked for.
    pub version: Version,
    /// From a continue token: the snapshot of the first page and the last key served.
    pub resume: Option<(u64, ObjKey)>,
    /// At most this many objects (`limit` > 0).
    pub limit: Option<usize>,
}

fn parse_rv(text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "resourceVersion: Invalid value: {text:?}: invalid resource version"
        ))
    })
}

/// Reads `resourceVersion`, `resourceVersionMatch`, `limit` and `continue`.
pub fn list_request(
    query: &HashMap<String, String>,
    limit: Option<i64>,
) -> Result<ListRequest, ApiError> {
    let rv = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    let version = match (rv, query.get("resourceVersionMatch").map(String::as_str)) {
        ("" | "0", None | Some("") | Some("NotOlderThan")) => Version::Any,
        ("", Some(_)) => {
            return Err(ApiError::bad_request(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
            ));
        }
        (rv, Some("Exact")) => Version::Exact(parse_rv(rv)?),
        (rv, None | Some("") | Some("NotOlderThan")) => Version::NotOlderThan(parse_rv(rv)?),
        (_, Some(other)) => {
            return Err(ApiError::bad_request(format!(
                "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
            )));
        }
    };
    let resume = match query.get("continue").filter(|c| !c.is_empty()) {
        None => None,
        Some(_) if !matches!(rv, "" | "0") => {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue".into(),
            ));
        }
        Some(token) => Some(decode(token)?),
    };
    Ok(ListRequest {
        version,
        resume,
        limit: limit
            .filter(|l| *l > 0)
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX)),
    })
}

impl ListRequest {
    /// The resourceVersion the page shows (`None`: the current one), or the refusal:
    /// a version the server has not reached (504) or no longer has (410).
    pub fn snapshot(&self, current: u64, floor: u64) -> Result<Option<u64>, ApiError> {
        if let Some((rv, _)) = &self.resume {
            if *rv < floor {
                return Err(ApiError::new(410, "Expired", INCONSISTENT_CONTINUE.into()));
            }
            return Ok(Some(*rv));
        }
        match self.version {
            Version::Any => Ok(None),
            Version::Exact(rv) | Version::NotOlderThan(rv) if rv > current => {
                Err(too_large(rv, current))
            }
            Version::Exact(rv) if rv < floor => {
                Err(ApiError::new(410, "Expired", EXPIRED_LIST.into()))
            }
            Version::Exact(rv) => Ok(Some(rv)),
            Version::NotOlderThan(_) => Ok(None),
        }
    }
}

fn too_large(rv: u64, current: u64) -> ApiError {
    ApiError::new(
        504,
        "Timeout",
        format!("Too large resource version: {rv}, current: {current}"),
    )
    .with_details(json!({
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }))
}

/// The token for the page after `last` of the list at `rv`: the apiserver's shape (URL-safe
/// base64 of `{"v", "rv", "start"}`, `start` being the key to continue after, NUL-terminated).
pub fn encode(rv: u64, last: &ObjKey) -> String {
    let start = format!("{}/{}\u{0}", last.0, last.1);
    URL_SAFE_NO_PAD.encode(json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).to_string())
}

fn decode(token: &str) -> Result<(u64, ObjKey), ApiError> {
    let invalid = |why: &str| ApiError::bad_request(format!("invalid continue token: {why}"));
    let bytes = URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|e| invalid(&e.to_string()))?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(&e.to_string()))?;
    if value.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(invalid("continue key is not supported"));
    }
    let rv = value
        .get("rv")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("no resource version"))?;
    let start = value
        .get("start")
        .and_then(Value::as_str)
        .and_then(|s| s.strip_suffix('\u{0}'))
        .and_then(|s| s.split_once('/'))
        .ok_or_else(|| invalid("no start key"))?;
    Ok((rv, (start.0.to_string(), start.1.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_continue_token_round_trips_its_snapshot_and_key() {
        let token = encode(42, &("apps".into(), "web-0".into()));
        let request = list_request(&query(&[("continue", &token)]), Some(2)).unwrap();
        assert_eq!(request.resume, Some((42, ("apps".into(), "web-0".into()))));
        assert_eq!(request.limit, Some(2));
        assert_eq!(request.snapshot(50, 40), Ok(Some(42)));
        let expired = request.snapshot(50, 43).unwrap_err();
        assert_eq!((expired.code, expired.reason), (410, "Expired"));
    }

    #[test]
    fn bad_tokens_and_versions_are_400s_and_future_versions_504() {
        for pairs in [
            vec![("continue", "not a token")],
            vec![
                ("continue", &*encode(1, &(String::new(), "a".into()))),
                ("resourceVersion", "5"),
            ],
            vec![("resourceVersion", "abc")],
            vec![
                ("resourceVersion", "5"),
                ("resourceVersionMatch", "Sometimes"),
            ],
        ] {
            let refused = list_request(&query(&pairs), None).unwrap_err();
            assert_eq!(refused.code, 400, "{pairs:?}: {refused:?}");
        }
        let exact = list_request(
            &query(&[("resourceVersion", "9"), ("resourceVersionMatch", "Exact")]),
            None,
        )
        .unwrap();
        assert_eq!(exact.snapshot(10, 5), Ok(Some(9)));
        assert_eq!(exact.snapshot(8, 5).unwrap_err().code, 504);
        assert_eq!(exact.snapshot(20, 10).unwrap_err().code, 410);
        let newer = list_request(&query(&[("resourceVersion", "9")]), None).unwrap();
        assert_eq!(newer.snapshot(10, 5), Ok(None));
    }
}
