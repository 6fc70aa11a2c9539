//! The catalogue of validation rules: a stable id for tooling (`--format json`), the spec
//! section, and whether upstream's webhook wraps the message (§3.1 rules 1–22).

use serde::Serialize;

/// A validation rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Rule {
    /// Stable identifier, e.g. `image-tag`.
    pub id: &'static str,
    /// Where the spec states it, e.g. `§3.1 #12`.
    pub section: &'static str,
    /// Whether upstream wraps the message as `validating NodeWright "<nw>": …`.
    #[serde(skip)]
    pub wrapped: bool,
}

macro_rules! rules {
    ($($(#[$doc:meta])* $name:ident = $id:literal, $section:literal, $wrapped:literal;)*) => {
        $( $(#[$doc])* pub const $name: Rule = Rule { id: $id, section: $section, wrapped: $wrapped }; )*
        /// Every rule, in evaluation order.
        pub const ALL: &[Rule] = &[$($name),*];
    };
}

rules! {
    /// `metadata.name` missing.
    NAME_REQUIRED = "name-required", "object metadata", false;
    /// `metadata.name` not an RFC 1123 subdomain.
    NAME_INVALID = "name-invalid", "object metadata", false;
    /// NodeWright name too long for its per-node keys (§4.1).
    NAME_TOO_LONG = "name-too-long", "§4.1", false;
    /// A maintenance-window annotation that cannot be read (docs/maintenance-windows.md).
    MAINTENANCE_WINDOW = "maintenance-window", "maintenance windows", false;
    /// An approval-gate annotation that cannot be read or names an unknown compartment
    /// (docs/approvals.md).
    APPROVAL_GATE = "approval-gate", "approval gates", false;
    /// A schema `required` field is absent (§3.3).
    SCHEMA_REQUIRED = "schema-required", "§3.3", false;
    /// A value of the wrong JSON type (§3.3).
    SCHEMA_TYPE = "schema-type", "§3.3", false;
    /// Below a schema minimum (§3.3).
    SCHEMA_MINIMUM = "schema-minimum", "§3.3", false;
    /// Above a schema maximum (§3.3).
    SCHEMA_MAXIMUM = "schema-maximum", "§3.3", false;
    /// A string not matching its schema pattern (§3.3).
    SCHEMA_PATTERN = "schema-pattern", "§3.3", false;
    /// A value outside its enum (§3.3).
    SCHEMA_ENUM = "schema-enum", "§3.3", false;
    /// A string too long (§3.3).
    SCHEMA_MAX_LENGTH = "schema-max-length", "§3.3", false;
    /// A string too short (§3.3).
    SCHEMA_MIN_LENGTH = "schema-min-length", "§3.3", false;
    /// A field the schema does not know (the apiserver drops it; kubectl warns).
    SCHEMA_UNKNOWN_FIELD = "schema-unknown-field", "§3.3", false;
    /// The object passed the schema but could not be decoded into the typed form.
    DECODE = "decode", "§3.3", false;
    /// A duration that is not Go syntax.
    DURATION_INVALID = "duration-invalid", "§1.4/§1.5", false;
    /// A resource quantity that does not parse.
    QUANTITY_INVALID = "quantity-invalid", "§1.5", false;
    /// §3.1 #1.
    BUDGET_BOTH = "interruption-budget-both", "§3.1 #1", true;
    /// §3.1 #2.
    DRAIN_TIMEOUT_NEGATIVE = "drain-timeout-negative", "§3.1 #2", true;
    /// §3.1 #3.
    DRAIN_GRACE_NEGATIVE = "drain-grace-period-negative", "§3.1 #3", true;
    /// §3.1 #4.
    POLICY_AND_BUDGET = "policy-and-budget", "§3.1 #4", true;
    /// §3.1 #5.
    POD_NON_INTERRUPT_LABELS = "pod-non-interrupt-labels-invalid", "§3.1 #5", true;
    /// §3.1 #6.
    NODE_SELECTORS = "node-selectors-invalid", "§3.1 #6", true;
    /// §3.1 #7.
    PACKAGE_NAME_MISMATCH = "package-name-mismatch", "§3.1 #7", true;
    /// §3.1 #8.
    PACKAGE_NAME_INVALID = "package-name-invalid", "§3.1 #8", true;
    /// §3.1 #9.
    CONFIG_GLOB_UNMATCHED = "config-interrupt-glob-unmatched", "§3.1 #9", true;
    /// §3.1 #10.
    CONFIG_KEY_MISSING = "config-interrupt-key-missing", "§3.1 #10", true;
    /// §3.1 #11.
    IMAGE_DIGEST = "image-digest", "§3.1 #11", true;
    /// §3.1 #12.
    IMAGE_TAG = "image-tag", "§3.1 #12", true;
    /// §3.1 #13.
    VERSION_INVALID = "version-invalid", "§3.1 #13", true;
    /// §3.1 #14.
    RESOURCES_PARTIAL = "resources-partial", "§3.1 #14", true;
    /// §3.1 #15.
    CPU_LIMIT_BELOW_REQUEST = "cpu-limit-below-request", "§3.1 #15", true;
    /// §3.1 #16.
    MEMORY_LIMIT_BELOW_REQUEST = "memory-limit-below-request", "§3.1 #16", true;
    /// §3.1 #17.
    RESOURCES_NOT_POSITIVE = "resources-not-positive", "§3.1 #17", true;
    /// §3.1 #18.
    UNINSTALL_APPLY_WITHOUT_ENABLED = "uninstall-apply-without-enabled", "§3.1 #18", true;
    /// §3.1 #19.
    STAGE_TIMEOUT_NEGATIVE = "stage-timeout-negative", "§3.1 #19", true;
    /// §3.1 #20.
    DEPENDS_ON_VERSION_EMPTY = "depends-on-version-empty", "§3.1 #20", true;
    /// §3.1 #21.
    DEPENDS_ON_MISSING = "depends-on-missing", "§3.1 #21", true;
    /// §3.1 #22.
    DEPENDS_ON_CYCLE = "depends-on-cycle", "§3.1 #22", true;
    /// §3.2 #1.
    UNINSTALL_REMOVAL = "uninstall-removal", "§3.2 #1", false;
    /// §3.2 #2, first branch.
    UNINSTALL_DOWNGRADE_APPLY_FIRST = "uninstall-downgrade-apply-first", "§3.2 #2", false;
    /// §3.2 #2, second branch.
    UNINSTALL_DOWNGRADE_INCOMPLETE = "uninstall-downgrade-incomplete", "§3.2 #2", false;
    /// §3.2 #3 (warning).
    UNINSTALL_CANCELLED = "uninstall-cancelled", "§3.2 #3", false;
    /// §3.1 #23.
    POLICY_NOT_FOUND = "policy-not-found", "§3.1 #23", false;
    /// §3.4: default budget sets neither field.
    POLICY_DEFAULT_BUDGET_NEITHER = "policy-default-budget-neither", "§3.4", false;
    /// §3.4: default budget sets both fields.
    POLICY_DEFAULT_BUDGET_BOTH = "policy-default-budget-both", "§3.4", false;
    /// §3.4: default strategy kind count.
    POLICY_DEFAULT_STRATEGY = "policy-default-strategy", "§3.4", false;
    /// §3.4: compartment named `__default__`.
    POLICY_COMPARTMENT_RESERVED = "policy-compartment-reserved", "§3.4", false;
    /// §3.4: duplicate compartment name.
    POLICY_COMPARTMENT_DUPLICATE = "policy-compartment-duplicate", "§3.4", false;
    /// §3.4: compartment budget sets neither field.
    POLICY_COMPARTMENT_BUDGET_NEITHER = "policy-compartment-budget-neither", "§3.4", false;
    /// §3.4: compartment budget sets both fields.
    POLICY_COMPARTMENT_BUDGET_BOTH = "policy-compartment-budget-both", "§3.4", false;
    /// §3.4: compartment strategy kind count.
    POLICY_COMPARTMENT_STRATEGY = "policy-compartment-strategy", "§3.4", false;
    /// §3.4: invalid compartment selector.
    POLICY_COMPARTMENT_SELECTOR = "policy-compartment-selector", "§3.4", false;
    /// §3.4: two compartments with identical selectors.
    POLICY_COMPARTMENT_SELECTOR_IDENTICAL = "policy-compartment-selector-identical", "§3.4", false;
    /// §3.4: delete while referenced.
    POLICY_STILL_REFERENCED = "policy-still-referenced", "§3.4 delete", false;
    /// Two documents declare the same kind and name.
    DUPLICATE_NAME = "duplicate-name", "whole-set", false;
}
