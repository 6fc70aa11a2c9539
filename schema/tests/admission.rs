//! One failing manifest per admission rule (spec/operator.md §3), asserting the rule's exact
//! message and field path, plus defaulting (§2.1) and "all violations, not just the first".

use std::collections::BTreeSet;

use nodewright_schema::validate::{
    self, PolicyCatalog, Severity, Violation, default_policy, policy_delete, rules,
    validate_nodewright_value, validate_policy_value,
};
use nodewright_schema::{
    DeploymentPolicy, NodeState, NodeWright, PackageStatus, Sequencing, Stage, State,
};
use serde_json::Value;

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("test YAML does not parse: {e}\n{text}"))
}

/// A NodeWright named `nw` with the given `spec:` body (indented by two spaces).
fn nw_yaml(spec: &str) -> Value {
    yaml(&format!(
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: nw\nspec:\n{spec}"
    ))
}

/// A single valid package `tuning` with extra package fields (indented by six spaces).
fn pkg(extra: &str) -> Value {
    nw_yaml(&format!(
        "  packages:\n    tuning:\n      version: 1.0.0\n      image: example/tuning\n{extra}"
    ))
}

fn policy_yaml(spec: &str) -> Value {
    yaml(&format!(
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: DeploymentPolicy\nmetadata:\n  name: p\nspec:\n{spec}"
    ))
}

fn no_policies() -> BTreeSet<String> {
    BTreeSet::new()
}

fn check_nw(raw: &Value) -> Vec<Violation> {
    let catalog = no_policies();
    validate_nodewright_value(raw, None, Some(&catalog as &dyn PolicyCatalog)).1
}

/// Asserts exactly one violation of `rule` exists, with this path and message.
fn expect(violations: &[Violation], rule: rules::Rule, path: &str, message: &str) {
    let hits: Vec<&Violation> = violations.iter().filter(|v| v.rule == rule).collect();
    assert_eq!(
        hits.len(),
        1,
        "expected one {} violation, got {violations:#?}",
        rule.id
    );
    assert_eq!(hits[0].path.to_string(), path, "path of {}", rule.id);
    assert_eq!(hits[0].message, message, "message of {}", rule.id);
}

#[test]
fn a_valid_nodewright_has_no_violations() {
    let v = check_nw(&pkg(
        "      configMap:\n        a.conf: x\n      configInterrupts:\n        \"*.conf\": {type: reboot}\n",
    ));
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn nodewright_create_rules() {
    // (spec body, rule, path, message) — §3.1 rules 1–21 and 23 in order.
    let cases: Vec<(Value, rules::Rule, &str, &str)> = vec![
        (
            nw_yaml("  interruptionBudget: {percent: 10, count: 2}\n"),
            rules::BUDGET_BOTH,
            "spec.interruptionBudget",
            "interruption budget: error InterruptionBudget is not valid, both percent and count can not be set at the same time",
        ),
        (
            nw_yaml("  drainConfig: {timeout: -5s}\n"),
            rules::DRAIN_TIMEOUT_NEGATIVE,
            "spec.drainConfig.timeout",
            "drain config: drainConfig.timeout must be greater than or equal to 0",
        ),
        (
            nw_yaml("  drainConfig: {gracePeriod: -1s}\n"),
            rules::DRAIN_GRACE_NEGATIVE,
            "spec.drainConfig.gracePeriod",
            "drain config: drainConfig.gracePeriod must be greater than or equal to 0",
        ),
        (
            nw_yaml("  deploymentPolicy: p\n  interruptionBudget: {count: 1}\n"),
            rules::POLICY_AND_BUDGET,
            "spec.deploymentPolicy",
            "deploymentPolicy and interruptionBudget are mutually exclusive",
        ),
        (
            nw_yaml(
                "  podNonInterruptLabels:\n    matchExpressions:\n    - {key: app, operator: In, values: []}\n",
            ),
            rules::POD_NON_INTERRUPT_LABELS,
            "spec.podNonInterruptLabels.matchExpressions[0]",
            "pod non-interrupt labels are not valid: values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            nw_yaml("  nodeSelectors:\n    matchLabels: {\"bad key\": x}\n"),
            rules::NODE_SELECTORS,
            "spec.nodeSelectors.matchLabels[bad key]",
            "node selectors are not valid: key: Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            pkg("      name: other\n"),
            rules::PACKAGE_NAME_MISMATCH,
            "spec.packages.tuning.name",
            "error package tuning's name was set to other. Do not explicitly set the name in the package's definition",
        ),
        (
            nw_yaml(
                "  packages:\n    Tuning_1:\n      version: 1.0.0\n      image: example/tuning\n",
            ),
            rules::PACKAGE_NAME_INVALID,
            "spec.packages.Tuning_1",
            "package name [Tuning_1] is not valid. must match [^[a-z][-a-z0-9]{0,41}[a-z]$]",
        ),
        (
            pkg(
                "      configMap: {a.conf: x}\n      configInterrupts:\n        \"*.ini\": {type: reboot}\n",
            ),
            rules::CONFIG_GLOB_UNMATCHED,
            "spec.packages.tuning.configInterrupts[*.ini]",
            "error config interrupt glob \"*.ini\" does not match any configMap keys",
        ),
        (
            pkg(
                "      configMap: {a.conf: x}\n      configInterrupts:\n        b.conf: {type: reboot}\n",
            ),
            rules::CONFIG_KEY_MISSING,
            "spec.packages.tuning.configInterrupts[b.conf]",
            "error config interrupt for key that doesn't exist: b.conf doesn't exist as a configmap",
        ),
        (
            nw_yaml(
                "  packages:\n    tuning:\n      version: 1.0.0\n      image: example/tuning@sha256:abc\n",
            ),
            rules::IMAGE_DIGEST,
            "spec.packages.tuning.image",
            "error package tuning's image 'example/tuning@sha256:abc' contains an inline digest. Do not embed a digest in the image; pin the image bytes using the package's containerSHA field instead",
        ),
        (
            nw_yaml(
                "  packages:\n    tuning:\n      version: 1.0.0\n      image: \"localhost:5000/example/tuning:\"\n",
            ),
            rules::IMAGE_TAG,
            "spec.packages.tuning.image",
            "error package tuning's image 'localhost:5000/example/tuning:' contains an inline tag ''. Do not embed a tag in the image; the package version supplies the tag",
        ),
        (
            nw_yaml(
                "  packages:\n    tuning:\n      version: 1.2.3.4\n      image: example/tuning\n",
            ),
            rules::VERSION_INVALID,
            "spec.packages.tuning.version",
            "error version string for tuning is invalid: 1.2.3.4",
        ),
        (
            // A zero counts as unset, so this is "partial", not "not positive".
            pkg(
                "      resources: {cpuRequest: \"0\", cpuLimit: 1, memoryRequest: 1Mi, memoryLimit: 1Mi}\n",
            ),
            rules::RESOURCES_PARTIAL,
            "spec.packages.tuning.resources",
            "package \"tuning\": if any resource override is set, all of cpuRequest, cpuLimit, memoryRequest, memoryLimit must be set",
        ),
        (
            pkg(
                "      resources: {cpuRequest: 200m, cpuLimit: 100m, memoryRequest: 1Mi, memoryLimit: 1Mi}\n",
            ),
            rules::CPU_LIMIT_BELOW_REQUEST,
            "spec.packages.tuning.resources.cpuLimit",
            "package \"tuning\": cpuLimit (100m) must be >= cpuRequest (200m)",
        ),
        (
            pkg(
                "      resources: {cpuRequest: 1, cpuLimit: 1000m, memoryRequest: 1Gi, memoryLimit: 1000Mi}\n",
            ),
            rules::MEMORY_LIMIT_BELOW_REQUEST,
            "spec.packages.tuning.resources.memoryLimit",
            "package \"tuning\": memoryLimit (1000Mi) must be >= memoryRequest (1Gi)",
        ),
        (
            pkg(
                "      resources: {cpuRequest: -100m, cpuLimit: 100m, memoryRequest: 1Mi, memoryLimit: 1Mi}\n",
            ),
            rules::RESOURCES_NOT_POSITIVE,
            "spec.packages.tuning.resources",
            "package \"tuning\": all resource values must be positive",
        ),
        (
            pkg("      uninstall: {enabled: false, apply: true}\n"),
            rules::UNINSTALL_APPLY_WITHOUT_ENABLED,
            "spec.packages.tuning.uninstall.apply",
            "package \"tuning\": uninstall.apply requires uninstall.enabled to be true",
        ),
        (
            pkg("      stageTimeout: -1m\n"),
            rules::STAGE_TIMEOUT_NEGATIVE,
            "spec.packages.tuning.stageTimeout",
            "package \"tuning\": stageTimeout must be greater than or equal to 0",
        ),
        (
            pkg("      dependsOn: {other: \"\"}\n"),
            rules::DEPENDS_ON_VERSION_EMPTY,
            "spec.packages.tuning.dependsOn.other",
            "error trying to validate NodeWright spec building graph: DependsOn version is empty for [other]",
        ),
        (
            pkg("      dependsOn: {ghost: 1.0.0, tuning: 9.9.9}\n"),
            rules::DEPENDS_ON_MISSING,
            "spec.packages.tuning.dependsOn",
            "error trying to validate NodeWright spec graph is invalid: error graph is not valid, missing: [ghost|1.0.0 tuning|9.9.9]",
        ),
        (
            nw_yaml("  deploymentPolicy: rollout\n"),
            rules::POLICY_NOT_FOUND,
            "spec.deploymentPolicy",
            "deploymentPolicy \"rollout\" not found",
        ),
    ];
    for (raw, rule, path, message) in &cases {
        let v = check_nw(raw);
        expect(&v, *rule, path, message);
        // Nothing else fires (rule 4's case also names a policy missing from the empty catalog).
        assert!(
            v.iter()
                .all(|x| x.rule == *rule || x.rule == rules::POLICY_NOT_FOUND),
            "only {} expected: {v:#?}",
            rule.id
        );
    }
    // Every §3.1 rule except the cycle (below) has a case here.
    let covered: BTreeSet<&str> = cases.iter().map(|c| c.1.id).collect();
    let section_3_1: Vec<&str> = rules::ALL
        .iter()
        .filter(|r| r.section.starts_with("§3.1") && r.id != "depends-on-cycle")
        .map(|r| r.id)
        .collect();
    for id in section_3_1 {
        assert!(covered.contains(id), "no test case for {id}");
    }
}

#[test]
fn dependency_cycles_name_every_member() {
    let raw = nw_yaml(
        "  packages:\n    aa:\n      version: 1.0.0\n      image: example/a\n      dependsOn: {bb: 1.0.0}\n    bb:\n      version: 1.0.0\n      image: example/b\n      dependsOn: {cc: 2.0.0}\n    cc:\n      version: 2.0.0\n      image: example/c\n      dependsOn: {aa: 1.0.0}\n    self:\n      version: 1.0.0\n      image: example/s\n      dependsOn: {self: 1.0.0}\n",
    );
    let v = check_nw(&raw);
    let cycles: Vec<&Violation> = v
        .iter()
        .filter(|x| x.rule == rules::DEPENDS_ON_CYCLE)
        .collect();
    assert_eq!(cycles.len(), 2, "{v:#?}");
    assert_eq!(cycles[0].path.to_string(), "spec.packages.aa.dependsOn");
    assert_eq!(
        cycles[0].message,
        "error trying to validate NodeWright spec graph is invalid: dependsOn forms a cycle: [aa|1.0.0 -> bb|1.0.0 -> cc|2.0.0 -> aa|1.0.0]. Packages in a cycle never become runnable; remove one of these dependencies"
    );
    assert!(cycles[1].message.contains("[self|1.0.0 -> self|1.0.0]"));
    // Wrapped as upstream's webhook would answer.
    assert!(
        cycles[0]
            .admission_message("nw")
            .starts_with("validating NodeWright \"nw\": error trying")
    );
}

#[test]
fn every_violation_is_returned_in_rule_order() {
    let raw = nw_yaml(
        "  interruptionBudget: {percent: 10, count: 2}\n  deploymentPolicy: gone\n  packages:\n    tuning:\n      version: latest\n      image: example/tuning:1\n      uninstall: {apply: true}\n",
    );
    let v = check_nw(&raw);
    let ids: Vec<&str> = v.iter().map(|x| x.rule.id).collect();
    assert_eq!(
        ids,
        [
            "interruption-budget-both",
            "policy-and-budget",
            "image-tag",
            "version-invalid",
            "uninstall-apply-without-enabled",
            "policy-not-found"
        ]
    );
    // Rule 23 is not wrapped; the others are.
    assert_eq!(
        v[5].admission_message("nw"),
        "deploymentPolicy \"gone\" not found"
    );
    assert!(
        v[0].admission_message("nw")
            .starts_with("validating NodeWright \"nw\": interruption budget:")
    );
}

#[test]
fn policy_lookup_failure_is_reported() {
    let failing = |_: &str| -> Result<bool, String> { Err("connection refused".into()) };
    let raw = nw_yaml("  deploymentPolicy: rollout\n");
    let v = validate_nodewright_value(&raw, None, Some(&failing as &dyn PolicyCatalog)).1;
    expect(
        &v,
        rules::POLICY_NOT_FOUND,
        "spec.deploymentPolicy",
        "error checking if deploymentPolicy \"rollout\" exists: connection refused",
    );
}

fn typed(raw: &Value) -> NodeWright {
    serde_json::from_value(raw.clone()).unwrap()
}

fn with_node_state(mut nw: NodeWright, entries: &[(&str, &str)]) -> NodeWright {
    let mut state = NodeState::default();
    for (name, version) in entries {
        state.upsert(PackageStatus::new(
            name,
            version,
            "example/x",
            Stage::Apply,
            State::Complete,
        ));
    }
    let status = nw.status.get_or_insert_with(Default::default);
    status.node_state = Some([("node-a".to_string(), state)].into_iter().collect());
    nw
}

fn update(old: &NodeWright, new: &Value) -> Vec<Violation> {
    validate_nodewright_value(new, Some(old), None).1
}

#[test]
fn update_only_rules() {
    let enabled = |version: &str, apply: bool| {
        pkg(&format!(
            "      uninstall: {{enabled: true, apply: {apply}}}\n"
        ))
        .to_string()
        .replace("1.0.0", version)
    };
    let enabled_v = |version: &str, apply: bool| -> Value {
        serde_json::from_str(&enabled(version, apply)).unwrap()
    };
    let removed = nw_yaml("  packages: {}\n");

    // §3.2 #1: removal while entries remain.
    let old = with_node_state(typed(&enabled_v("1.0.0", true)), &[("tuning", "1.0.0")]);
    expect(
        &update(&old, &removed),
        rules::UNINSTALL_REMOVAL,
        "spec.packages",
        "package \"tuning\" has uninstall.enabled=true; set uninstall.apply=true and wait for completion before removing from spec",
    );
    // Fully uninstalled (no entry for the old version anywhere): removal allowed.
    let old_done = with_node_state(typed(&enabled_v("1.0.0", true)), &[("other", "1.0.0")]);
    assert!(update(&old_done, &removed).is_empty());
    // Never reconciled (no status): allowed.
    assert!(update(&typed(&enabled_v("1.0.0", false)), &removed).is_empty());

    // §3.2 #2: downgrade without apply first.
    let old = with_node_state(typed(&enabled_v("2.0.0", false)), &[("tuning", "2.0.0")]);
    expect(
        &update(&old, &enabled_v("1.0.0", false)),
        rules::UNINSTALL_DOWNGRADE_APPLY_FIRST,
        "spec.packages.tuning.version",
        "package \"tuning\": downgrade not allowed — set uninstall.apply=true first, wait for uninstall to complete, then change version",
    );
    // ... with apply but not yet uninstalled everywhere.
    let old = with_node_state(typed(&enabled_v("2.0.0", true)), &[("tuning", "2.0.0")]);
    let v = update(&old, &enabled_v("1.0.0", true));
    expect(
        &v,
        rules::UNINSTALL_DOWNGRADE_INCOMPLETE,
        "spec.packages.tuning.version",
        "package \"tuning\": downgrade not allowed — uninstall has not yet completed on all nodes. Wait for the uninstall to finish, then change version",
    );
    // ... allowed once uninstalled, and for packages without uninstall.enabled.
    let old = with_node_state(typed(&enabled_v("2.0.0", true)), &[]);
    assert!(update(&old, &enabled_v("1.0.0", true)).is_empty());
    let plain_old = typed(
        &pkg("")
            .to_string()
            .replace("1.0.0", "2.0.0")
            .parse::<Value>()
            .unwrap(),
    );
    assert!(update(&plain_old, &pkg("")).is_empty());

    // §3.2 #3: cancel is a warning.
    let old = with_node_state(typed(&enabled_v("1.0.0", true)), &[("tuning", "1.0.0")]);
    let v = update(&old, &enabled_v("1.0.0", false));
    expect(
        &v,
        rules::UNINSTALL_CANCELLED,
        "spec.packages.tuning.uninstall.apply",
        "package \"tuning\": uninstall cancelled — nodes where uninstall completed will need to re-install",
    );
    assert_eq!(v[0].severity, Severity::Warning);
    assert!(!validate::has_errors(&v));
}

#[test]
fn schema_rules_read_like_the_apiserver() {
    let cases: Vec<(Value, rules::Rule, &str, &str)> = vec![
        (
            nw_yaml("  priority: 0\n"),
            rules::SCHEMA_MINIMUM,
            "spec.priority",
            "spec.priority in body should be greater than or equal to 1",
        ),
        (
            nw_yaml("  sequencing: sometimes\n"),
            rules::SCHEMA_ENUM,
            "spec.sequencing",
            "Unsupported value: \"sometimes\": supported values: \"node\", \"all\"",
        ),
        (
            nw_yaml("  priority: high\n"),
            rules::SCHEMA_TYPE,
            "spec.priority",
            "spec.priority in body must be of type integer: \"string\"",
        ),
        (
            nw_yaml("  interruptionBudget: {percent: 101}\n"),
            rules::SCHEMA_MAXIMUM,
            "spec.interruptionBudget.percent",
            "spec.interruptionBudget.percent in body should be less than or equal to 100",
        ),
        (
            nw_yaml("  interruptionBudget: {count: -1}\n"),
            rules::SCHEMA_MINIMUM,
            "spec.interruptionBudget.count",
            "spec.interruptionBudget.count in body should be greater than or equal to 0",
        ),
        (
            nw_yaml("  packages:\n    tuning:\n      image: example/tuning\n"),
            rules::SCHEMA_REQUIRED,
            "spec.packages.tuning.version",
            "Required value",
        ),
        (
            nw_yaml(
                "  packages:\n    tuning:\n      version: 1.0.0\n      image: \"example tuning\"\n",
            ),
            rules::SCHEMA_PATTERN,
            "spec.packages.tuning.image",
            "spec.packages.tuning.image in body should match '^\\S+$'",
        ),
        (
            pkg("      containerSHA: sha256:abc\n"),
            rules::SCHEMA_PATTERN,
            "spec.packages.tuning.containerSHA",
            "spec.packages.tuning.containerSHA in body should match '^sha256:[0-9a-f]{64}$'",
        ),
        (
            pkg("      interrupt: {type: explode}\n"),
            rules::SCHEMA_ENUM,
            "spec.packages.tuning.interrupt.type",
            "Unsupported value: \"explode\": supported values: \"reboot\", \"restartAllServices\", \"service\", \"noop\"",
        ),
        (
            pkg("      interrupt: {services: [a]}\n"),
            rules::SCHEMA_REQUIRED,
            "spec.packages.tuning.interrupt.type",
            "Required value",
        ),
        (
            pkg(&format!("      name: {}\n", "a".repeat(44))),
            rules::SCHEMA_MAX_LENGTH,
            "spec.packages.tuning.name",
            "spec.packages.tuning.name in body should be at most 43 chars long",
        ),
        (
            policy_yaml(
                "  default:\n    budget: {percent: 10}\n    strategy: {linear: {failureThreshold: 0}}\n",
            ),
            rules::SCHEMA_MINIMUM,
            "spec.default.strategy.linear.failureThreshold",
            "spec.default.strategy.linear.failureThreshold in body should be greater than or equal to 1",
        ),
        (
            policy_yaml(
                "  default:\n    budget: {percent: 10}\n    strategy: {exponential: {growthFactor: 1}}\n",
            ),
            rules::SCHEMA_MINIMUM,
            "spec.default.strategy.exponential.growthFactor",
            "spec.default.strategy.exponential.growthFactor in body should be greater than or equal to 2",
        ),
        (
            policy_yaml("  default:\n    budget: {percent: 0}\n    strategy: {fixed: {}}\n"),
            rules::SCHEMA_MINIMUM,
            "spec.default.budget.percent",
            "spec.default.budget.percent in body should be greater than or equal to 1",
        ),
        (
            policy_yaml(
                "  default:\n    budget: {count: 1}\n    strategy: {fixed: {batchThreshold: 101}}\n",
            ),
            rules::SCHEMA_MAXIMUM,
            "spec.default.strategy.fixed.batchThreshold",
            "spec.default.strategy.fixed.batchThreshold in body should be less than or equal to 100",
        ),
        (
            policy_yaml("  default:\n    budget: {count: 1}\n"),
            rules::SCHEMA_REQUIRED,
            "spec.default.strategy",
            "Required value",
        ),
        (
            policy_yaml(
                "  default:\n    budget: {count: 1}\n    strategy: {fixed: {}}\n  compartments:\n  - name: \"\"\n    selector: {}\n    budget: {count: 1}\n",
            ),
            rules::SCHEMA_MIN_LENGTH,
            "spec.compartments[0].name",
            "spec.compartments[0].name in body should be at least 1 chars long",
        ),
        (
            policy_yaml(
                "  default:\n    budget: {count: 1}\n    strategy: {fixed: {}}\n  compartments:\n  - name: a\n    budget: {count: 1}\n",
            ),
            rules::SCHEMA_REQUIRED,
            "spec.compartments[0].selector",
            "Required value",
        ),
    ];
    for (raw, rule, path, message) in &cases {
        let v = if raw["kind"] == "NodeWright" {
            check_nw(raw)
        } else {
            validate_policy_value(raw).1
        };
        let hit = v.iter().find(|x| x.rule == *rule && x.path == *path);
        let hit = hit.unwrap_or_else(|| panic!("no {} at {path}: {v:#?}", rule.id));
        assert_eq!(hit.message, *message);
    }
}

#[test]
fn unknown_fields_warn_and_names_are_bounded() {
    let v = check_nw(&nw_yaml("  sequencng: all\n"));
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(v[0].severity, Severity::Warning);
    assert_eq!(v[0].path.to_string(), "spec.sequencng");

    let mut raw = nw_yaml("  priority: 1\n");
    raw["metadata"]["name"] = Value::String("a".repeat(50));
    let v = check_nw(&raw);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].rule, rules::NAME_TOO_LONG);
    raw["metadata"]["name"] = Value::String("a".repeat(49));
    assert!(check_nw(&raw).is_empty());
    raw["metadata"]["name"] = Value::String("Bad_Name".into());
    assert_eq!(check_nw(&raw)[0].rule, rules::NAME_INVALID);
}

fn policy(spec: &str) -> Vec<Violation> {
    validate_policy_value(&policy_yaml(spec)).1
}

const DEFAULT_OK: &str = "  default:\n    budget: {percent: 10}\n    strategy: {fixed: {}}\n";

#[test]
fn deployment_policy_rules() {
    assert!(policy(DEFAULT_OK).is_empty());
    let comp = |body: &str| format!("{DEFAULT_OK}  compartments:\n{body}");
    let cases: Vec<(String, rules::Rule, &str, &str)> = vec![
        (
            "  default:\n    budget: {}\n    strategy: {fixed: {}}\n".into(),
            rules::POLICY_DEFAULT_BUDGET_NEITHER,
            "spec.default.budget",
            "default budget: exactly one of percent or count must be set",
        ),
        (
            "  default:\n    budget: {percent: 1, count: 1}\n    strategy: {fixed: {}}\n".into(),
            rules::POLICY_DEFAULT_BUDGET_BOTH,
            "spec.default.budget",
            "default budget: percent and count are mutually exclusive",
        ),
        (
            "  default:\n    budget: {count: 1}\n    strategy: {}\n".into(),
            rules::POLICY_DEFAULT_STRATEGY,
            "spec.default.strategy",
            "default strategy: exactly one of fixed, linear, or exponential must be set",
        ),
        (
            comp(
                "  - name: __default__\n    selector: {matchLabels: {a: b}}\n    budget: {count: 1}\n",
            ),
            rules::POLICY_COMPARTMENT_RESERVED,
            "spec.compartments[0].name",
            "compartment name \"__default__\" is reserved and cannot be used",
        ),
        (
            comp(
                "  - name: a\n    selector: {matchLabels: {a: b}}\n    budget: {count: 1}\n  - name: a\n    selector: {matchLabels: {c: d}}\n    budget: {count: 1}\n",
            ),
            rules::POLICY_COMPARTMENT_DUPLICATE,
            "spec.compartments[1].name",
            "compartment name \"a\" is not unique",
        ),
        (
            comp("  - name: a\n    selector: {matchLabels: {a: b}}\n    budget: {}\n"),
            rules::POLICY_COMPARTMENT_BUDGET_NEITHER,
            "spec.compartments[0].budget",
            "compartment \"a\" budget: exactly one of percent or count must be set",
        ),
        (
            comp(
                "  - name: a\n    selector: {matchLabels: {a: b}}\n    budget: {count: 1, percent: 5}\n",
            ),
            rules::POLICY_COMPARTMENT_BUDGET_BOTH,
            "spec.compartments[0].budget",
            "compartment \"a\" budget: percent and count are mutually exclusive",
        ),
        (
            comp(
                "  - name: a\n    selector: {matchLabels: {a: b}}\n    budget: {count: 1}\n    strategy: {fixed: {}, linear: {}}\n",
            ),
            rules::POLICY_COMPARTMENT_STRATEGY,
            "spec.compartments[0].strategy",
            "compartment \"a\" strategy: exactly one of fixed, linear, or exponential must be set",
        ),
        (
            comp(
                "  - name: a\n    selector:\n      matchExpressions: [{key: zone, operator: Near}]\n    budget: {count: 1}\n",
            ),
            rules::POLICY_COMPARTMENT_SELECTOR,
            "spec.compartments[0].selector.matchExpressions[0]",
            "compartment \"a\" has invalid selector: \"Near\" is not a valid label selector operator",
        ),
        (
            comp(
                "  - name: a\n    selector: {matchLabels: {a: b}}\n    budget: {count: 1}\n  - name: b\n    selector: {matchLabels: {a: b}}\n    budget: {count: 2}\n",
            ),
            rules::POLICY_COMPARTMENT_SELECTOR_IDENTICAL,
            "spec.compartments[1].selector",
            "compartment \"b\" has identical selector to compartment \"a\"",
        ),
    ];
    for (spec, rule, path, message) in &cases {
        let v = policy(spec);
        expect(&v, *rule, path, message);
        assert!(
            v.iter().all(|x| x.rule == *rule),
            "only {}: {v:#?}",
            rule.id
        );
    }
    let covered: BTreeSet<&str> = cases.iter().map(|c| c.1.id).collect();
    for r in rules::ALL.iter().filter(|r| r.section == "§3.4") {
        assert!(covered.contains(r.id), "no test case for {}", r.id);
    }
}

#[test]
fn deleting_a_referenced_policy() {
    let v = policy_delete("rollout", &["zeta", "alpha"]).unwrap();
    assert_eq!(
        v.message,
        "cannot delete DeploymentPolicy \"rollout\": still referenced by 2 NodeWright(s): [alpha zeta]"
    );
    assert_eq!(v.rule, rules::POLICY_STILL_REFERENCED);
    assert!(policy_delete("rollout", &[]).is_none());
}

#[test]
fn defaults_are_applied_as_the_spec_states() {
    let nw = typed(&nw_yaml("  deploymentPolicyOptions: {}\n"));
    assert_eq!(nw.spec.priority, 200);
    assert_eq!(nw.spec.sequencing, Sequencing::Node);
    assert!(!nw.spec.serial && !nw.spec.runtime_required);
    assert_eq!(
        nw.spec
            .deployment_policy_options
            .unwrap()
            .reset_batch_state_on_completion,
        Some(true)
    );
    let nw = typed(&nw_yaml("  priority: 5\n"));
    assert_eq!(nw.spec.deployment_policy_options, None);

    let raw = policy_yaml(
        "  default:\n    budget: {percent: 10}\n    strategy: {linear: {}}\n  compartments:\n  - name: a\n    selector: {matchLabels: {a: b}}\n    budget: {count: 1}\n    strategy: {exponential: {initialBatch: 3, failureThreshold: 2}}\n  - name: b\n    selector: {matchLabels: {b: c}}\n    budget: {count: 1}\n",
    );
    let (defaulted, v) = validate_policy_value(&raw);
    assert!(v.is_empty(), "{v:#?}");
    let p: DeploymentPolicy = defaulted.unwrap();
    assert_eq!(p.spec.reset_batch_state_on_completion, Some(true));
    let linear = p.spec.default.strategy.linear.clone().unwrap();
    assert_eq!(
        (
            linear.initial_batch,
            linear.delta,
            linear.growth_factor,
            linear.batch_threshold,
            linear.safety_limit,
            linear.failure_threshold
        ),
        (Some(1), Some(1), None, Some(100), Some(50), None)
    );
    let exp = p.spec.compartments[0]
        .strategy
        .clone()
        .unwrap()
        .exponential
        .unwrap();
    assert_eq!(
        (
            exp.initial_batch,
            exp.delta,
            exp.growth_factor,
            exp.batch_threshold,
            exp.safety_limit,
            exp.failure_threshold
        ),
        (Some(3), None, Some(2), Some(100), Some(50), Some(2))
    );
    // A budget-only compartment stays budget-only.
    assert_eq!(p.spec.compartments[1].strategy, None);
    // Defaulting is idempotent.
    assert_eq!(default_policy(&p), p);
}
