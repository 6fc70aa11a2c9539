//! Equivalents of the upstream config, schema-version and step-set tests (spec §17, items
//! 16–29, 36–52, 59). Each test names what it asserts; the comment gives the inventory item.

use nodewright_agent::config::{self, Config, Error, SchemaVersion, Step, check_step_set};
use serde_json::{Value, json};

fn step(path: &str) -> Value {
    json!({"name": "n", "path": path, "arguments": [], "returncodes": [0], "on_host": true,
           "idempotence": true, "upgrade_step": false, "env": {}})
}

fn sample() -> Value {
    json!({
        "schema_version": "v1", "package_name": "foo", "package_version": "1.0.0",
        "expected_config_files": ["a.conf"],
        "modes": {"apply": [step("apply.sh")], "apply-check": [step("apply_check.sh")]}
    })
}

fn parse(v: &Value) -> Result<Config, Error> {
    config::parse(&v.to_string(), "config.json")
}

fn modes(spec: &[(&str, &[Step])]) -> Vec<(String, Vec<Step>)> {
    spec.iter()
        .map(|(m, s)| (m.to_string(), s.to_vec()))
        .collect()
}

fn upgrade_step(path: &str) -> Step {
    let mut s = Step::new(path);
    s.upgrade_step = true;
    s
}

// §17.16
#[test]
fn valid_v1_config_with_existing_step_files_loads() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("skyhook_dir")).unwrap();
    for f in ["apply.sh", "apply_check.sh"] {
        std::fs::write(d.path().join("skyhook_dir").join(f), "#!/bin/sh\n").unwrap();
    }
    std::fs::write(d.path().join("config.json"), sample().to_string()).unwrap();
    let (cfg, warnings) = config::load(d.path()).unwrap();
    assert_eq!(cfg.steps("apply")[0].path, "apply.sh");
    assert!(warnings.is_empty(), "{warnings:?}");
}

// §17.17
#[test]
fn config_writer_emits_the_v1_document() {
    let cfg = parse(&sample()).unwrap();
    let mut want = sample();
    want["root_dir"] = json!("/");
    want["modes"]["apply"][0]["name"] = json!("n");
    assert_eq!(cfg.to_json(), want);
}

// §17.18
#[test]
fn schema_check_passes_on_the_sample() {
    assert!(parse(&sample()).is_ok());
}

// §17.19
#[test]
fn unknown_schema_version_is_a_validation_error() {
    for v in ["v0", "v2", "latest", "1"] {
        let mut doc = sample();
        doc["schema_version"] = json!(v);
        assert!(
            matches!(parse(&doc), Err(Error::UnknownSchemaVersion(_))),
            "{v}"
        );
    }
}

// §17.20
#[test]
fn only_schema_version_present_is_a_validation_error() {
    assert!(matches!(
        parse(&json!({"schema_version": "v1"})),
        Err(Error::Schema { .. })
    ));
}

// §17.21
#[test]
fn migrating_a_v1_config_is_the_identity() {
    assert_eq!(config::migrate(sample()), sample());
}

// §17.22
#[test]
fn schema_registry_has_both_v1_schemas_and_nothing_for_unknown_versions() {
    assert_eq!(
        SchemaVersion::Numbered(1).schema_ids(),
        ["v1/skyhook-agent-schema.json", "v1/step-schema.json"]
    );
    assert!(SchemaVersion::Numbered(7).schema_ids().is_empty());
    assert_eq!(SchemaVersion::Latest.resolve().schema_ids().len(), 2);
}

// §17.23
#[test]
fn version_pattern_accepts_strict_semver_only() {
    for v in [
        "1.0.0",
        "1.0.0-dev",
        "1.0.0+build1",
        "2024.12.19",
        "0.0.9",
        "1.0.0-rc.1+b.2",
    ] {
        let mut doc = sample();
        doc["package_version"] = json!(v);
        assert!(parse(&doc).is_ok(), "{v} should be accepted");
    }
    for v in [
        "1.0",
        "a",
        "1.0.0-",
        "1.0.0_",
        "2024.01.01",
        "01.0.0",
        "1.0.0-01",
        "",
    ] {
        let mut doc = sample();
        doc["package_version"] = json!(v);
        assert!(
            matches!(parse(&doc), Err(Error::Schema { .. })),
            "{v} should be rejected"
        );
    }
}

// §17.24
#[test]
fn each_version_equals_itself_and_its_string() {
    let v1 = SchemaVersion::parse("v1").unwrap();
    assert_eq!(v1, v1);
    assert_eq!(v1, "v1");
    assert_eq!(SchemaVersion::Latest, "latest");
}

// §17.25
#[test]
fn different_versions_are_unequal_as_values_and_strings() {
    let (v1, v2) = (SchemaVersion::Numbered(1), SchemaVersion::Numbered(2));
    assert_ne!(v1, v2);
    assert_ne!(v1, "v2");
    assert_ne!(v2, "v1");
}

// §17.26
#[test]
fn versions_order_by_number_and_equals_are_neither_less_nor_greater() {
    let p = |s| SchemaVersion::parse(s).unwrap();
    assert!(p("v1") < p("v2") && p("v2") < p("v3"));
    assert_eq!(p("v2").cmp(&p("v2")), std::cmp::Ordering::Equal);
    assert!(p("v2") <= p("v2") && p("v2") >= p("v2"));
    assert!(p("latest") <= p("latest") && p("latest") >= p("latest"));
}

// §17.27
#[test]
fn latest_is_greater_than_every_numbered_version() {
    for n in [1, 2, 99, u32::MAX] {
        assert!(SchemaVersion::Latest > SchemaVersion::Numbered(n));
    }
}

// §17.28
#[test]
fn versions_are_unequal_to_other_spellings_and_non_versions() {
    let v1 = SchemaVersion::Numbered(1);
    for s in ["", "1", "v01", "V1", "None"] {
        assert_ne!(v1, s);
    }
    assert!(SchemaVersion::parse("1").is_none());
}

// §17.29
#[test]
fn latest_resolves_to_the_highest_numbered_version() {
    let max = *config::SUPPORTED_VERSIONS.iter().max().unwrap();
    assert_eq!(
        SchemaVersion::Latest.resolve(),
        SchemaVersion::Numbered(max)
    );
}

// §17.36
#[test]
fn step_sets_serialise_per_mode_and_missing_files_fail_validation() {
    let cfg = parse(&sample()).unwrap();
    let j = cfg.to_json();
    assert_eq!(j["modes"]["apply"][0]["path"], "apply.sh");
    assert_eq!(j["modes"]["apply-check"][0]["path"], "apply_check.sh");
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("skyhook_dir")).unwrap();
    std::fs::write(d.path().join("skyhook_dir/apply.sh"), "").unwrap();
    match config::check_step_files(&cfg, &d.path().join("skyhook_dir")) {
        Err(Error::MissingStepFiles(m)) => assert_eq!(m, ["apply_check.sh"]),
        other => panic!("expected missing files, got {other:?}"),
    }
}

// §17.37
#[test]
fn dump_load_dump_is_stable() {
    let once = parse(&sample()).unwrap().to_json();
    let twice = parse(&once).unwrap().to_json();
    assert_eq!(once, twice);
}

// §17.38
#[test]
fn invalid_idempotence_value_is_an_error() {
    let mut doc = sample();
    doc["modes"]["apply"][0]["idempotence"] = json!("auto");
    match parse(&doc) {
        Err(Error::Schema { field, .. }) => assert_eq!(field, "modes.apply[0].idempotence"),
        other => panic!("{other:?}"),
    }
}

// §17.39
#[test]
fn name_defaults_to_path_and_explicit_name_is_kept() {
    assert_eq!(Step::new("dir/a.sh").name, "dir/a.sh");
    assert_eq!(parse(&sample()).unwrap().steps("apply")[0].name, "n");
}

// §17.40
#[test]
fn conventional_check_names_give_no_warnings() {
    let w = check_step_set(&modes(&[
        ("apply", &[Step::new("a.sh"), Step::new("b")]),
        (
            "apply-check",
            &[Step::new("a_check.sh"), Step::new("b_check")],
        ),
    ]))
    .unwrap();
    assert!(w.is_empty(), "{w:?}");
}

// §17.41
#[test]
fn one_missing_conventional_check_gives_exactly_that_warning() {
    let w = check_step_set(&modes(&[
        ("apply", &[Step::new("a.sh"), Step::new("b.sh")]),
        ("apply-check", &[Step::new("a_check.sh")]),
    ]))
    .unwrap();
    assert_eq!(w.len(), 1);
    assert!(w[0].contains("b_check.sh"), "{w:?}");
}

// §17.42
#[test]
fn two_missing_conventional_checks_give_both_warnings() {
    let w = check_step_set(&modes(&[
        ("apply", &[Step::new("a.sh"), Step::new("b.sh")]),
        ("apply-check", &[Step::new("other.sh")]),
    ]))
    .unwrap();
    assert_eq!(w.len(), 2);
    assert!(
        w[0].contains("a_check.sh") && w[1].contains("b_check.sh"),
        "{w:?}"
    );
}

// §17.43
#[test]
fn empty_mode_map_means_no_defined_steps() {
    let e = check_step_set(&[]).unwrap_err();
    assert!(matches!(e, Error::NoSteps) && e.to_string().contains("no defined steps"));
}

// §17.44
#[test]
fn only_check_modes_is_an_error_listing_the_action_modes() {
    let e = check_step_set(&modes(&[("apply-check", &[Step::new("a.sh")])])).unwrap_err();
    assert!(matches!(e, Error::OnlyCheckModes));
    assert_eq!(
        e.to_string(),
        "There are only check modes defined. You must define at least one of UNINSTALL, UPGRADE, APPLY, CONFIG, POST_INTERRUPT"
    );
}

fn missing_check(mode: &str) {
    let e = check_step_set(&modes(&[(mode, &[Step::new("a.sh")])])).unwrap_err();
    match &e {
        Error::MissingCheckMode { mode: m } => assert_eq!(m, mode),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains(mode));
}

// §17.45
#[test]
fn apply_without_apply_check_is_an_error_naming_apply() {
    missing_check("apply");
}

// §17.46
#[test]
fn post_interrupt_without_its_check_is_an_error() {
    missing_check("post-interrupt");
}

// §17.47
#[test]
fn config_without_config_check_is_an_error() {
    missing_check("config");
}

// §17.48
#[test]
fn uninstall_without_uninstall_check_is_an_error() {
    missing_check("uninstall");
}

// §17.49
#[test]
fn upgrade_without_upgrade_check_is_an_error() {
    let e = check_step_set(&modes(&[("upgrade", &[upgrade_step("u.sh")])])).unwrap_err();
    assert!(
        matches!(e, Error::MissingCheckMode { ref mode } if mode == "upgrade"),
        "{e}"
    );
}

// §17.50
#[test]
fn upgrade_step_in_config_is_an_error_naming_the_mode() {
    let e = check_step_set(&modes(&[
        ("config", &[upgrade_step("u.sh")]),
        ("config-check", &[Step::new("u_check.sh")]),
    ]))
    .unwrap_err();
    assert!(
        matches!(e, Error::UpgradeStepOutsideUpgrade { ref mode, .. } if mode == "config"),
        "{e}"
    );
}

// §17.51
#[test]
fn upgrade_step_with_an_argument_is_an_error_listing_it() {
    let mut doc = sample();
    doc["modes"]["upgrade"] = json!([{"name": "u", "path": "u.sh", "arguments": ["x"], "returncodes": [0],
        "on_host": true, "idempotence": true, "upgrade_step": true}]);
    let e = parse(&doc).unwrap_err();
    assert!(matches!(e, Error::UpgradeStepArguments { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "UpgradeStep u can not have any arguments, but found: ['x']"
    );
}

// §17.52
#[test]
fn all_lists_empty_means_no_defined_steps() {
    let e = check_step_set(&modes(&[("apply", &[]), ("apply-check", &[])])).unwrap_err();
    assert!(matches!(e, Error::NoSteps));
}

// §17.59
#[test]
fn package_name_and_version_are_read_from_config_data() {
    let cfg = parse(&sample()).unwrap();
    assert_eq!(
        (cfg.package_name.as_str(), cfg.package_version.as_str()),
        ("foo", "1.0.0")
    );
}

#[test]
fn unknown_step_key_is_rejected_and_requires_interrupt_is_accepted() {
    let mut doc = sample();
    doc["modes"]["apply"][0]["requires_interrupt"] = json!(true);
    assert!(parse(&doc).is_ok());
    doc["modes"]["apply"][0]["bogus"] = json!(1);
    assert!(matches!(parse(&doc), Err(Error::UnknownStepKey { ref key, .. }) if key == "bogus"));
}

#[test]
fn unknown_top_level_keys_are_accepted_and_unknown_mode_keys_rejected() {
    let mut doc = sample();
    doc["maintainer"] = json!("someone");
    doc["modes"]["interrupt"] = json!([]);
    assert!(parse(&doc).is_ok());
    doc["modes"]["reboot"] = json!([]);
    assert!(matches!(parse(&doc), Err(Error::UnknownMode(ref m)) if m == "reboot"));
}

#[test]
fn empty_returncodes_and_bad_step_names_are_schema_errors() {
    let mut doc = sample();
    doc["modes"]["apply"][0]["returncodes"] = json!([]);
    assert!(matches!(parse(&doc), Err(Error::Schema { .. })));
    let mut doc = sample();
    doc["modes"]["apply"][0]["name"] = json!("has space");
    assert!(matches!(parse(&doc), Err(Error::Schema { .. })));
}

#[test]
fn patterns_accept_one_trailing_newline_like_pythons_re_dollar() {
    let mut doc = sample();
    doc["package_version"] = json!("1.0.0\n");
    doc["modes"]["apply"][0]["name"] = json!("step\n");
    assert!(parse(&doc).is_ok());
    doc["package_version"] = json!("1.0.0\n\n");
    assert!(matches!(parse(&doc), Err(Error::Schema { .. })));
}

#[test]
fn root_dir_is_not_validated() {
    let mut doc = sample();
    doc["root_dir"] = json!(42);
    assert!(parse(&doc).is_ok());
}

#[test]
fn conventional_check_name_splits_the_whole_path_at_its_last_dot_like_upstream() {
    use nodewright_agent::config::conventional_check_path as c;
    assert_eq!(c("a/b.sh"), "a/b_check.sh");
    assert_eq!(c("steps.d/run"), "steps_check.d/run");
    assert_eq!(c("plain"), "plain_check");
    assert_eq!(c("x."), "x_check");
    assert_eq!(c("a.tar.gz"), "a.tar_check.gz");
}
