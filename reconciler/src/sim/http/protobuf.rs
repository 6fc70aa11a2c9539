//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as client-go's typed
//! clients send them (kubectl's `create namespace|job|configmap`, drain's evictions): the
//! envelope is the magic `k8s\0` and a `runtime.Unknown` whose `raw` is the object's message.
//! Each message is decoded with the field table of the Kubernetes protos
//! (`data/protobuf-fields.json`, from the `k8s-pb` bindings) into the object's JSON form, and
//! the request goes on as JSON. Answers are always JSON: a client that accepts only protobuf
//! gets 406, as from a server that does not encode it (docs/decisions.md).

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::body::Bytes;
use base64::Engine;
use serde_json::{Map, Value};

use super::error::ApiError;

/// The media type of Kubernetes protobuf bodies.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug)]
struct Field {
    tag: u64,
    /// The JSON name; empty for an embedded struct whose fields are inlined.
    name: String,
    /// `string`, `int32`, `int64`, `bool`, `double`, `float`, `bytes` or `m:<definition>`.
    kind: String,
    /// `optional`, `repeated` or `map`.
    cardinality: String,
}

struct Tables {
    fields: HashMap<String, Vec<Field>>,
    /// (apiVersion, kind) → definition, for the top-level kinds in `fields`.
    kinds: HashMap<(String, String), String>,
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let raw: HashMap<String, Vec<Value>> =
            serde_json::from_str(include_str!("data/protobuf-fields.json")).unwrap_or_default();
        let fields: HashMap<String, Vec<Field>> = raw
            .into_iter()
            .map(|(name, rows)| {
                let rows = rows
                    .iter()
                    .map(|row| Field {
                        tag: row[0].as_u64().unwrap_or_default(),
                        name: row[1].as_str().unwrap_or_default().to_string(),
                        kind: row[2].as_str().unwrap_or_default().to_string(),
                        cardinality: row[3].as_str().unwrap_or_default().to_string(),
                    })
                    .collect();
                (name, rows)
            })
            .collect();
        let extensions: Map<String, Value> =
            serde_json::from_str(include_str!("data/openapi-extensions.json")).unwrap_or_default();
        let mut kinds = HashMap::new();
        for (definition, entry) in &extensions {
            if !fields.contains_key(definition) {
                continue;
            }
            let gvks = entry
                .get("")
                .and_then(|e| e.get("x-kubernetes-group-version-kind"))
                .and_then(Value::as_array);
            for gvk in gvks.into_iter().flatten() {
                let text = |k: &str| gvk.get(k).and_then(Value::as_str).unwrap_or_default();
                let api_version = if text("group").is_empty() {
                    text("version").to_string()
                } else {
                    format!("{}/{}", text("group"), text("version"))
                };
                kinds.insert((api_version, text("kind").to_string()), definition.clone());
            }
        }
        Tables { fields, kinds }
    })
}

/// The request body as JSON: protobuf bodies are decoded, others pass unchanged.
pub fn json_body(content_type: &str, body: Bytes) -> Result<(String, Bytes), ApiError> {
    if !content_type.starts_with(PROTOBUF) {
        return Ok((content_type.to_string(), body));
    }
    let value = decode_envelope(&body)?;
    Ok(("application/json".into(), Bytes::from(value.to_string())))
}

fn decode_envelope(body: &[u8]) -> Result<Value, ApiError> {
    let bad =
        |why: String| ApiError::bad_request(format!("the protobuf body cannot be decoded: {why}"));
    let inner = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("it does not start with the Kubernetes protobuf prefix".into()))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    let mut unknown = Reader::new(inner);
    while let Some((tag, value)) = unknown.next().map_err(bad)? {
        match (tag, value) {
            (1, Wire::Bytes(type_meta)) => {
                let mut reader = Reader::new(type_meta);
                while let Some((tag, value)) = reader.next().map_err(bad)? {
                    match (tag, value) {
                        (1, Wire::Bytes(b)) => api_version = String::from_utf8_lossy(b).into(),
                        (2, Wire::Bytes(b)) => kind = String::from_utf8_lossy(b).into(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let tables = tables();
    let Some(definition) = tables.kinds.get(&(api_version.clone(), kind.clone())) else {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (no protobuf for {kind} in {api_version})"
            ),
        ));
    };
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(api_version));
    object.insert("kind".into(), Value::String(kind));
    decode_message(tables, definition, raw, &mut object, 0).map_err(bad)?;
    Ok(Value::Object(object))
}

/// Refuses a request that accepts only protobuf answers (the server encodes JSON): 406, as
/// kube-apiserver answers a media type it cannot produce.
pub fn negotiate(accept: &str) -> Result<(), ApiError> {
    let ranges: Vec<&str> = accept
        .split(',')
        .map(|r| r.split(';').next().unwrap_or_default().trim())
        .filter(|r| !r.is_empty())
        .collect();
    if ranges.is_empty()
        || ranges
            .iter()
            .any(|r| !(r.starts_with(PROTOBUF) || r.contains("protobuf")))
    {
        return Ok(());
    }
    Err(ApiError::new(
        406,
        "NotAcceptable",
        format!(
            "only the following media types are accepted: application/json, application/yaml (asked for {accept})"
        ),
    ))
}

enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Self {
        Reader { data, at: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .data
                .get(self.at)
                .ok_or_else(|| "truncated varint".to_string())?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.data.len())
            .ok_or_else(|| "truncated field".to_string())?;
        let out = &self.data[self.at..end];
        self.at = end;
        Ok(out)
    }

    /// The next field's tag and value, or `None` at the end.
    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, String> {
        if self.at >= self.data.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                Wire::Fixed64(u64::from_le_bytes(b.try_into().map_err(|_| "fixed64")?))
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| "length overflow")?;
                Wire::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Wire::Fixed32(u32::from_le_bytes(b.try_into().map_err(|_| "fixed32")?))
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        Ok(Some((key >> 3, value)))
    }
}

/// Nesting deeper than this is refused (no Kubernetes object comes near it).
const MAX_DEPTH: usize = 64;

fn decode_message(
    tables: &Tables,
    definition: &str,
    bytes: &[u8],
    out: &mut Map<String, Value>,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("nesting too deep".into());
    }
    let fields = tables
        .fields
        .get(definition)
        .ok_or_else(|| format!("no protobuf fields for {definition}"))?;
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.next()? {
        let Some(field) = fields.iter().find(|f| f.tag == tag) else {
            continue;
        };
        match field.cardinality.as_str() {
            "map" => {
                let Wire::Bytes(entry) = wire else {
                    return Err(format!("{}: a map entry is not a message", field.name));
                };
                let (mut key, mut value) = (String::new(), Value::Null);
                let mut entry_reader = Reader::new(entry);
                while let Some((tag, wire)) = entry_reader.next()? {
                    match tag {
                        1 => key = scalar_text(wire),
                        2 => value = single(tables, &field.kind, wire, depth)?,
                        _ => {}
                    }
                }
                let map = out
                    .entry(field.name.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    map.insert(key, value);
                }
            }
            "repeated" => {
                let values = match (wire, field.kind.as_str()) {
                    // Packed numbers and booleans.
                    (Wire::Bytes(packed), "int32" | "int64" | "bool") => {
                        let mut r = Reader::new(packed);
                        let mut values = Vec::new();
                        while r.at < packed.len() {
                            values.push(single(
                                tables,
                                &field.kind,
                                Wire::Varint(r.varint()?),
                                depth,
                            )?);
                        }
                        values
                    }
                    (wire, kind) => vec![single(tables, kind, wire, depth)?],
                };
                let list = out
                    .entry(field.name.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(list) = list {
                    list.extend(values);
                }
            }
            _ => {
                let value = single(tables, &field.kind, wire, depth)?;
                // Go writes every non-pointer field, zero or not, and its JSON encoding omits
                // the zero ones (`omitempty`): a zero here reads as an absent field.
                if value.is_null() || (!field.kind.starts_with("m:") && is_zero(&value)) {
                    continue;
                }
                if field.name.is_empty() {
                    if let Value::Object(inlined) = value {
                        out.extend(inlined);
                    }
                } else {
                    out.insert(field.name.clone(), value);
                }
            }
        }
    }
    Ok(())
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn scalar_text(wire: Wire<'_>) -> String {
    match wire {
        Wire::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Wire::Varint(v) => v.to_string(),
        Wire::Fixed64(v) => v.to_string(),
        Wire::Fixed32(v) => v.to_string(),
    }
}

/// One value of type `kind`.
fn single(tables: &Tables, kind: &str, wire: Wire<'_>, depth: usize) -> Result<Value, String> {
    Ok(match (kind, wire) {
        ("string", Wire::Bytes(b)) => Value::String(String::from_utf8_lossy(b).into_owned()),
        ("bytes", Wire::Bytes(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        // Go's int32 and int64 travel as two's complement varints.
        ("int32", Wire::Varint(v)) => Value::from(v as i64 as i32),
        ("int64", Wire::Varint(v)) => Value::from(v as i64),
        ("bool", Wire::Varint(v)) => Value::Bool(v != 0),
        ("double", Wire::Fixed64(v)) => Value::from(f64::from_bits(v)),
        ("float", Wire::Fixed32(v)) => Value::from(f64::from(f32::from_bits(v))),
        (message, Wire::Bytes(b)) if message.starts_with("m:") => special(&message[2..], b)?
            .map_or_else(
                || {
                    let mut object = Map::new();
                    decode_message(tables, &message[2..], b, &mut object, depth + 1)?;
                    Ok::<_, String>(Value::Object(object))
                },
                Ok,
            )?,
        (kind, _) => return Err(format!("a {kind} field has the wrong wire type")),
    })
}

/// The JSON form of the apimachinery messages that serialize as something else than their
/// fields; `None` for any other message.
fn special(definition: &str, bytes: &[u8]) -> Result<Option<Value>, String> {
    let short = definition.rsplit('.').next().unwrap_or_default();
    if !definition.starts_with("io.k8s.apimachinery.") {
        return Ok(None);
    }
    let mut fields: HashMap<u64, Wire<'_>> = HashMap::new();
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.next()? {
        fields.insert(tag, wire);
    }
    let int = |tag: u64| match fields.get(&tag) {
        Some(Wire::Varint(v)) => *v as i64,
        _ => 0,
    };
    let bytes_of = |tag: u64| match fields.get(&tag) {
        Some(Wire::Bytes(b)) => *b,
        _ => &[][..],
    };
    let text = |tag: u64| String::from_utf8_lossy(bytes_of(tag)).into_owned();
    let raw_json = |tag: u64| -> Result<Value, String> {
        let b = bytes_of(tag);
        if b.is_empty() {
            return Ok(Value::Object(Map::new()));
        }
        serde_json::from_slice(b).map_err(|e| format!("embedded JSON: {e}"))
    };
    Ok(Some(match short {
        "Time" | "MicroTime" => {
            let (seconds, nanos) = (int(1), int(2));
            // Go's zero time (year 1) and an empty message are the JSON `null`.
            if seconds <= 0 && nanos == 0 {
                return Ok(Some(Value::Null));
            }
            let time = jiff::Timestamp::new(seconds, i32::try_from(nanos).unwrap_or_default())
                .map_err(|e| format!("time: {e}"))?;
            let whole = time.strftime("%Y-%m-%dT%H:%M:%S").to_string();
            if short == "MicroTime" {
                Value::String(format!("{whole}.{:06}Z", nanos / 1000))
            } else {
                Value::String(format!("{whole}Z"))
            }
        }
        "Duration" => Value::String(go_duration(int(1))),
        "FieldsV1" | "RawExtension" => raw_json(1)?,
        "IntOrString" => {
            if int(1) == 1 {
                Value::String(text(3))
            } else {
                Value::from(int(2) as i32)
            }
        }
        "Quantity" => Value::String(text(1)),
        _ => return Ok(None),
    }))
}

/// A duration as Go's `time.Duration.String()` writes it (`1h0m0s`, `1.5s`, `0s`).
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, div) = match n {
            n if n < 1_000 => ("ns", 1),
            n if n < 1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{sign}{}{unit}", trim_fraction(n, div));
    }
    let hours = n / 3_600_000_000_000;
    let minutes = n / 60_000_000_000 % 60;
    let seconds = trim_fraction(n % 60_000_000_000, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, m) => format!("{sign}{m}m{seconds}s"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}s"),
    }
}

fn trim_fraction(n: u64, div: u64) -> String {
    let whole = n / div;
    let fraction = n % div;
    if fraction == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Protobuf encoding for the tests: a field's key and length-delimited value.
    fn field(tag: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = varint(tag << 3 | 2);
        out.extend(varint(bytes.len() as u64));
        out.extend_from_slice(bytes);
        out
    }

    fn varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), field(1, &type_meta), field(2, raw)].concat()
    }

    #[test]
    fn a_config_map_decodes_to_its_json_form() {
        let entry = [field(1, b"a"), field(2, b"b")].concat();
        let metadata = [field(1, b"settings"), field(3, b"team")].concat();
        let raw = [field(1, &metadata), field(2, &entry)].concat();
        let (content_type, body) =
            json_body(PROTOBUF, Bytes::from(envelope("v1", "ConfigMap", &raw))).unwrap();
        assert_eq!(content_type, "application/json");
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "settings", "namespace": "team"},
                               "data": {"a": "b"}})
        );
    }

    #[test]
    fn special_messages_take_their_json_form() {
        let time = [varint(1 << 3), varint(1_700_000_000)].concat();
        assert_eq!(
            special("io.k8s.apimachinery.pkg.apis.meta.v1.Time", &time).unwrap(),
            Some(Value::String("2023-11-14T22:13:20Z".into()))
        );
        let int = [varint(2 << 3), varint(3)].concat();
        assert_eq!(
            special("io.k8s.apimachinery.pkg.util.intstr.IntOrString", &int).unwrap(),
            Some(Value::from(3))
        );
        assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
        assert_eq!(go_duration(1_500_000_000), "1.5s");
    }

    proptest::proptest! {
        /// Any bytes inside a well-formed envelope of a served kind decode or are a 400.
        #[test]
        fn garbage_messages_never_panic(
            kind in proptest::sample::select(&["Pod", "ConfigMap", "Namespace", "Node"][..]),
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
        ) {
            if let Err(e) = json_body(PROTOBUF, Bytes::from(envelope("v1", kind, &raw))) {
                proptest::prop_assert_eq!(e.code, 400);
            }
        }
    }

    #[test]
    fn unknown_kinds_and_garbage_are_refused() {
        let e = json_body(
            PROTOBUF,
            Bytes::from(envelope("example.com/v1", "Widget", b"")),
        )
        .unwrap_err();
        assert_eq!(e.code, 415);
        let e = json_body(PROTOBUF, Bytes::from_static(b"k8s\0\xff\xff")).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(negotiate("application/vnd.kubernetes.protobuf").is_err());
        assert!(negotiate("application/vnd.kubernetes.protobuf,application/json").is_ok());
    }
}
