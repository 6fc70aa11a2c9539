//! The v1 schema checks against upstream's verdicts: documents mutated field by field, each
//! validated by Python `jsonschema` with the upstream schema files
//! (`agent/scripts/record_schema_verdicts.py`), replayed through our hand checks.

use nodewright_agent::config::validate_schema;

#[test]
fn schema_checks_agree_with_upstream_jsonschema_on_every_recorded_document() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/schema/verdicts.jsonl"
    ))
    .unwrap();
    let mut total = 0;
    let mut wrong = vec![];
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        // A documented NodeWright deviation overrides upstream's verdict (always a rejection).
        let want = v["valid"].as_bool().unwrap() && v.get("nodewright").is_none();
        let got = validate_schema(&v["doc"]);
        total += 1;
        if got.is_ok() != want {
            wrong.push(format!("upstream valid={want}, ours {got:?}: {}", v["doc"]));
        }
    }
    assert!(total > 150);
    assert!(
        wrong.is_empty(),
        "{} of {total} verdicts differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
