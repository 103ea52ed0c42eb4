//! Generic name and metadata validation, as `k8s.io/apimachinery/pkg/util/validation`,
//! `pkg/api/validation` and `pkg/api/validation/path` (v0.33) do it, with upstream's message
//! texts. Objects are wire-form JSON; results are `FieldError`s (or bare messages for the
//! `is_*` string checks, which callers wrap into a `FieldError` with their own path).

use rand::Rng;
use serde_json::Value;

use crate::error::FieldError;

/// Longest DNS-1123 label (and namespace name).
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Longest DNS-1123 subdomain (and most object names).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Longest label value, and longest name part of a qualified name.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Upper bound on the summed length of all annotation keys and values (256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT_B: usize = 256 * (1 << 10);
/// Upstream `FieldImmutableErrorMsg`.
pub const FIELD_IMMUTABLE_ERROR_MSG: &str = "field is immutable";
/// Length of the random suffix `generateName` gets.
pub const GENERATED_SUFFIX_LENGTH: usize = 5;
/// Longest prefix kept from `generateName` (upstream `MaxGeneratedNameLength` = 63 - 5).
pub const MAX_GENERATED_NAME_LENGTH: usize = 63 - GENERATED_SUFFIX_LENGTH;
/// The alphabet of generated suffixes (no vowels, no confusable characters).
pub const NAME_SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR_MSG: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_MAP_KEY_ERR_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";
const IS_NEGATIVE_ERROR_MSG: &str = "must be greater than or equal to 0";

// ---------------------------------------------------------------------------------------
// Message helpers (upstream MaxLenError, RegexError, EmptyError)
// ---------------------------------------------------------------------------------------

/// `must be no more than N characters`
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// Upstream `RegexError`: the message, examples and the regex used.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(e);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

fn empty_error() -> &'static str {
    "must be non-empty"
}

// ---------------------------------------------------------------------------------------
// Hand-written matchers for upstream's regexes (anchored at both ends)
// ---------------------------------------------------------------------------------------

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => alnum(f) && alnum(l) && b.iter().all(|&c| alnum(c) || c == b'-'),
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1035_label(s: &str) -> bool {
    s.as_bytes().first().is_some_and(u8::is_ascii_lowercase) && matches_dns1123_label(s)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------
// String checks (util/validation)
// ---------------------------------------------------------------------------------------

/// `IsDNS1123Label`: at most 63 characters of `[a-z0-9-]`, alphanumeric at both ends.
/// Returns the problems; empty means valid.
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            // A valid subdomain but not a label: the length was already checked, so dots.
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(DNS1123_LABEL_ERR_MSG, DNS1123_LABEL_FMT, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`: at most 253 characters, dot-separated DNS-1123 labels.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(DNS1123_SUBDOMAIN_ERR_MSG, DNS1123_SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// `IsDNS1035Label` (Service names): like a DNS-1123 label but starting with a letter.
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1035_label(value) {
        errs.push(regex_error(DNS1035_LABEL_ERR_MSG, DNS1035_LABEL_FMT, &["my-name", "abc-123"]));
    }
    errs
}

/// `IsQualifiedName` (label and annotation keys, finalizers): an optional DNS-subdomain
/// prefix and `/`, then a name part of at most 63 characters.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                errs.extend(is_dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(format!("name part {}", max_len_error(LABEL_VALUE_MAX_LENGTH)));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `IsValidLabelValue`: empty, or at most 63 characters of `[-_.A-Za-z0-9]` with
/// alphanumerics at both ends.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !(value.is_empty() || matches_qualified_name_part(value)) {
        errs.push(regex_error(LABEL_VALUE_ERR_MSG, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
    }
    errs
}

/// `IsConfigMapKey` (ConfigMap and Secret data keys): `[-._a-zA-Z0-9]+`, at most 253
/// characters, not `.` or `..` and not starting with `..`.
pub fn is_config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    let ok =
        !value.is_empty() && value.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.' || c == b'_');
    if !ok {
        errs.push(regex_error(CONFIG_MAP_KEY_ERR_MSG, CONFIG_MAP_KEY_FMT, &["key.name", "KEY_NAME", "key-name"]));
    }
    if value == "." {
        errs.push("must not be '.'".to_string());
    } else if value == ".." {
        errs.push("must not be '..'".to_string());
    } else if value.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

/// `IsValidPathSegmentName` (names of RBAC objects, CSRs, Events): not `.` or `..`, and no
/// `/` or `%`.
pub fn validate_path_segment_name(name: &str) -> Vec<String> {
    for illegal in [".", ".."] {
        if name == illegal {
            return vec![format!("may not be '{illegal}'")];
        }
    }
    validate_path_segment_prefix(name)
}

/// `IsValidPathSegmentPrefix` (the `generateName` form): no `/` or `%`.
pub fn validate_path_segment_prefix(name: &str) -> Vec<String> {
    ["/", "%"].iter().filter(|c| name.contains(**c)).map(|c| format!("may not contain '{c}'")).collect()
}

// ---------------------------------------------------------------------------------------
// generateName
// ---------------------------------------------------------------------------------------

/// Five random characters from `bcdfghjklmnpqrstvwxz2456789` (upstream `utilrand.String(5)`).
pub fn generate_name_suffix<R: Rng + ?Sized>(rng: &mut R) -> String {
    (0..GENERATED_SUFFIX_LENGTH)
        .map(|_| {
            let i = rng.random_range(0..NAME_SUFFIX_ALPHABET.len());
            char::from(NAME_SUFFIX_ALPHABET.get(i).copied().unwrap_or(b'x'))
        })
        .collect()
}

/// Upstream `SimpleNameGenerator.GenerateName`: the prefix, cut to 58 bytes, plus a random
/// five-character suffix.
pub fn generate_name(prefix: &str) -> String {
    let mut base = prefix;
    if base.len() > MAX_GENERATED_NAME_LENGTH {
        let mut cut = MAX_GENERATED_NAME_LENGTH;
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base = &base[..cut];
    }
    format!("{base}{}", generate_name_suffix(&mut rand::rng()))
}

/// Upstream `maskTrailingDash`: a `generateName` prefix may end in `-` since a suffix follows;
/// the last two bytes become `a`.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        let bytes = name.as_bytes();
        let head = bytes.get(..name.len() - 2).unwrap_or_default();
        return format!("{}a", String::from_utf8_lossy(head));
    }
    name.to_string()
}

/// The problems with a `generateName` under a kind's name rule, as upstream's
/// `nameFn(generateName, prefix=true)`: DNS rules check the prefix with a trailing `-` masked;
/// path-segment rules (which already allow a trailing `-`) only forbid `/` and `%`.
pub fn validate_generate_name(generate_name: &str, name_fn: fn(&str) -> Vec<String>) -> Vec<String> {
    if name_fn("a-").is_empty() {
        name_fn(generate_name).into_iter().filter(|m| !m.starts_with("may not be '")).collect()
    } else {
        name_fn(&mask_trailing_dash(generate_name))
    }
}

// ---------------------------------------------------------------------------------------
// ObjectMeta
// ---------------------------------------------------------------------------------------

fn str_field<'a>(meta: &'a Value, key: &str) -> &'a str {
    meta.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A string-valued field that is present with another JSON type.
fn type_error(meta: &Value, key: &str, path: &str, errs: &mut Vec<FieldError>) {
    if let Some(v) = meta.get(key) {
        if !v.is_string() && !v.is_null() {
            errs.push(FieldError::invalid(format!("{path}.{key}"), v, "must be a string"));
        }
    }
}

/// String map entries in key order; reports entries that are not strings (and a value
/// that is not an object) as Invalid.
fn string_map<'a>(value: Option<&'a Value>, path: &str, errs: &mut Vec<FieldError>) -> Vec<(&'a str, &'a str)> {
    let mut out = Vec::new();
    match value {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                match v {
                    Value::String(s) => out.push((k.as_str(), s.as_str())),
                    other => errs.push(FieldError::invalid(path, other, "must be a string")),
                }
            }
        }
        Some(other) => errs.push(FieldError::invalid(path, other, "must be an object of strings")),
    }
    out.sort_unstable();
    out
}

/// `ValidateLabels` over a wire-form `labels` map: keys are qualified names, values valid
/// label values. Errors carry the map's path (no key), as upstream.
pub fn validate_labels(labels: Option<&Value>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, v) in string_map(labels, path, &mut errs) {
        for msg in is_qualified_name(k) {
            errs.push(FieldError::invalid(path, &Value::String(k.to_string()), msg));
        }
        for msg in is_valid_label_value(v) {
            errs.push(FieldError::invalid(path, &Value::String(v.to_string()), msg));
        }
    }
    errs
}

/// `ValidateAnnotations`: keys are qualified names (case-insensitively) and all keys and
/// values together are at most 256 KiB.
pub fn validate_annotations(annotations: Option<&Value>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let entries = string_map(annotations, path, &mut errs);
    let mut total = 0usize;
    for (k, v) in &entries {
        for msg in is_qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, &Value::String(k.to_string()), msg));
        }
        total = total.saturating_add(k.len()).saturating_add(v.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT_B));
    }
    errs
}

/// `schema.FromAPIVersionAndKind` → (group, version); an unparsable apiVersion gives none.
fn parse_group_version(api_version: &str) -> (String, String) {
    if api_version.is_empty() || api_version == "/" {
        return (String::new(), String::new());
    }
    match api_version.matches('/').count() {
        0 => (String::new(), api_version.to_string()),
        1 => match api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), String::new()),
        },
        _ => (String::new(), String::new()),
    }
}

/// `ValidateOwnerReferences`: apiVersion (with a version), kind, name and uid are required,
/// `v1 Event` may not own anything, and at most one reference has `controller: true`.
/// The paths are not indexed, as upstream.
pub fn validate_owner_references(refs: Option<&Value>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let list = match refs {
        None | Some(Value::Null) => return errs,
        Some(Value::Array(list)) => list,
        Some(other) => {
            errs.push(FieldError::invalid(path, other, "must be a list of owner references"));
            return errs;
        }
    };
    let mut first_controller: Option<String> = None;
    for r in list {
        if !r.is_object() {
            errs.push(FieldError::invalid(path, r, "must be an owner reference object"));
            continue;
        }
        for key in ["apiVersion", "kind", "name", "uid"] {
            type_error(r, key, path, &mut errs);
        }
        let api_version = str_field(r, "apiVersion");
        let kind = str_field(r, "kind");
        let name = str_field(r, "name");
        let uid = str_field(r, "uid");
        let (group, version) = parse_group_version(api_version);
        if version.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.apiVersion"),
                &Value::String(api_version.to_string()),
                "version must not be empty",
            ));
        }
        if kind.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.kind"),
                &Value::String(kind.to_string()),
                "kind must not be empty",
            ));
        }
        if name.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.name"),
                &Value::String(name.to_string()),
                "name must not be empty",
            ));
        }
        if uid.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.uid"),
                &Value::String(uid.to_string()),
                "uid must not be empty",
            ));
        }
        if group.is_empty() && version == "v1" && kind == "Event" {
            errs.push(FieldError::invalid(
                path,
                r,
                format!("{group}/{version}, Kind={kind} is disallowed from being an owner"),
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{kind}/{name}");
            match &first_controller {
                Some(first) => errs.push(FieldError::invalid(
                    path,
                    &Value::Array(list.clone()),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
    errs
}

/// `ValidateFinalizers`: each is a qualified name, and `orphan` and `foregroundDeletion`
/// exclude each other.
pub fn validate_finalizers(finalizers: Option<&Value>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let list = match finalizers {
        None | Some(Value::Null) => return errs,
        Some(Value::Array(list)) => list,
        Some(other) => {
            errs.push(FieldError::invalid(path, other, "must be a list of strings"));
            return errs;
        }
    };
    let mut orphan = false;
    let mut foreground = false;
    for f in list {
        let Some(name) = f.as_str() else {
            errs.push(FieldError::invalid(path, f, "must be a string"));
            continue;
        };
        for msg in is_qualified_name(name) {
            errs.push(FieldError::invalid(path, f, msg));
        }
        orphan |= name == "orphan";
        foreground |= name == "foregroundDeletion";
    }
    if orphan && foreground {
        errs.push(FieldError::invalid(
            path,
            &Value::Array(list.clone()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    errs
}

/// Most bytes a field manager's name may have (upstream `FieldManagerMaxLength`).
pub const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// Most bytes of a managedFields entry's `subresource` (upstream `MaxSubresourceNameLength`).
pub const MAX_SUBRESOURCE_NAME_LENGTH: usize = 256;

/// Go's `unicode.IsPrint`, near enough: no control characters, no spaces but U+0020.
pub fn is_printable(ch: char) -> bool {
    ch == ' ' || !(ch.is_control() || ch.is_whitespace() || ('\u{e000}'..='\u{f8ff}').contains(&ch))
}

/// Upstream's `ValidateFieldManager`: at most 128 bytes, printable characters only. Only
/// the first unprintable character is reported: each report repeats the whole value, so one
/// per character would make a long value's answer grow with its square.
pub fn validate_field_manager(manager: &str, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX_LENGTH {
        errs.push(FieldError::too_long(path, FIELD_MANAGER_MAX_LENGTH));
    }
    if let Some((i, ch)) = manager.char_indices().find(|(_, ch)| !is_printable(*ch)) {
        errs.push(FieldError::invalid(
            path,
            &Value::String(manager.to_string()),
            format!("invalid character U+{:04X} (at position {i})", ch as u32),
        ));
    }
    errs
}

/// Upstream's `ValidateManagedFields`: each entry's `operation` is `Apply` or `Update`, its
/// `fieldsType` empty or `FieldsV1`, its `manager` a valid field manager, its `subresource`
/// at most 256 bytes. (What the entries own is read, or reset, before this: `machinery::apply`.)
pub fn validate_managed_fields(list: Option<&Value>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(Value::Array(list)) = list else { return errs };
    for (i, entry) in list.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let text = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = text("operation");
        if !matches!(operation.as_str(), "Apply" | "Update") {
            errs.push(FieldError::invalid(
                format!("{at}.operation"),
                &Value::String(operation),
                "must be `Apply` or `Update`",
            ));
        }
        let fields_type = text("fieldsType");
        if !fields_type.is_empty() && fields_type != "FieldsV1" {
            errs.push(FieldError::invalid(
                format!("{at}.fieldsType"),
                &Value::String(fields_type),
                "must be `FieldsV1`",
            ));
        }
        errs.extend(validate_field_manager(&text("manager"), &format!("{at}.manager")));
        if text("subresource").len() > MAX_SUBRESOURCE_NAME_LENGTH {
            errs.push(FieldError::too_long(format!("{at}.subresource"), MAX_SUBRESOURCE_NAME_LENGTH));
        }
    }
    errs
}

/// `ValidateObjectMeta` over wire-form metadata. `name_fn` is the kind's name rule
/// (`is_dns1123_subdomain`, `is_dns1123_label`, `validate_path_segment_name`, ...);
/// `path` is normally `metadata`. The name must already be generated from `generateName`.
pub fn validate_object_meta(
    meta: &Value,
    namespaced: bool,
    name_fn: fn(&str) -> Vec<String>,
    path: &str,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !meta.is_object() && !meta.is_null() {
        errs.push(FieldError::invalid(path, meta, "must be an object"));
        return errs;
    }
    for key in ["name", "generateName", "namespace"] {
        type_error(meta, key, path, &mut errs);
    }
    let generate_name = str_field(meta, "generateName");
    if !generate_name.is_empty() {
        for msg in validate_generate_name(generate_name, name_fn) {
            errs.push(FieldError::invalid(
                format!("{path}.generateName"),
                &Value::String(generate_name.to_string()),
                msg,
            ));
        }
    }
    let name = str_field(meta, "name");
    if name.is_empty() {
        errs.push(FieldError::required(format!("{path}.name"), "name or generateName is required"));
    } else {
        for msg in name_fn(name) {
            errs.push(FieldError::invalid(format!("{path}.name"), &Value::String(name.to_string()), msg));
        }
    }
    let namespace = str_field(meta, "namespace");
    if namespaced {
        if namespace.is_empty() {
            errs.push(FieldError::required(format!("{path}.namespace"), ""));
        } else {
            for msg in is_dns1123_label(namespace) {
                errs.push(FieldError::invalid(format!("{path}.namespace"), &Value::String(namespace.to_string()), msg));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(format!("{path}.namespace"), "not allowed on this type"));
    }
    if let Some(g) = meta.get("generation") {
        match g.as_i64() {
            Some(n) if n < 0 => errs.push(FieldError::invalid(format!("{path}.generation"), g, IS_NEGATIVE_ERROR_MSG)),
            Some(_) => {}
            None if g.is_null() => {}
            None => errs.push(FieldError::invalid(format!("{path}.generation"), g, "must be an integer")),
        }
    }
    errs.extend(validate_labels(meta.get("labels"), &format!("{path}.labels")));
    errs.extend(validate_annotations(meta.get("annotations"), &format!("{path}.annotations")));
    errs.extend(validate_owner_references(meta.get("ownerReferences"), &format!("{path}.ownerReferences")));
    errs.extend(validate_finalizers(meta.get("finalizers"), &format!("{path}.finalizers")));
    errs.extend(validate_managed_fields(meta.get("managedFields"), &format!("{path}.managedFields")));
    errs
}

/// The immutable-field part of `ValidateObjectMetaUpdate`: `name`, `namespace`, `uid` and
/// `creationTimestamp` may not change (`field is immutable`). Missing, null and `""` are the
/// same. Generation, resourceVersion, deletion fields and finalizers-while-deleting are the
/// caller's; the rest of the metadata goes through `validate_object_meta`.
pub fn validate_object_meta_update(new_meta: &Value, old_meta: &Value) -> Vec<FieldError> {
    fn normalized(meta: &Value, key: &str) -> Value {
        match meta.get(key) {
            None | Some(Value::Null) => Value::Null,
            Some(Value::String(s)) if s.is_empty() => Value::Null,
            Some(v) => v.clone(),
        }
    }
    let mut errs = Vec::new();
    for key in ["name", "namespace", "uid", "creationTimestamp"] {
        let new = normalized(new_meta, key);
        let old = normalized(old_meta, key);
        if new != old {
            // Upstream renders the new value; strings stay strings (empty ones included),
            // a zero timestamp is `null`.
            let shown = match (&new, key) {
                (Value::Null, "creationTimestamp") => Value::Null,
                (Value::Null, _) => Value::String(String::new()),
                (v, _) => v.clone(),
            };
            errs.push(FieldError::immutable(format!("metadata.{key}"), &shown));
        }
    }
    errs
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
