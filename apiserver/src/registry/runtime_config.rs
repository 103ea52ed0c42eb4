//! `--runtime-config`, read as kube-apiserver reads it (`key=value` pairs, comma-separated,
//! the flag repeatable; a missing value is `true`; values as Go's `strconv.ParseBool`),
//! limited to turning off what kustos serves, so that a client can be tried against an
//! apiserver that lacks a version (one serving PodCertificateRequests only as `v1beta1`, as
//! kube-apiserver 1.34–1.36 do):
//! - `GROUP/VERSION=false`: every resource of that group version;
//! - `GROUP/VERSION/RESOURCE=false`: that resource alone (upstream's resource-level switch);
//! - `=true` on a group version or resource kustos serves: changes nothing (all of them are
//!   served by default).
//!
//! Refused, each with a one-line message: the `api/all`, `api/ga`, `api/beta`, `api/alpha`
//! keys (kustos has no off-by-default versions to turn on), the core group (`v1`, `api/v1`:
//! kustos does not run without it), a group version or resource kustos does not serve, and a
//! value that is not a boolean.
//!
//! What enters: the flag's values and the registry of built-in kinds. What leaves: that
//! registry without the resources turned off, or what is wrong.

use super::Registry;

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `registry` as `--runtime-config` (`values`, each one or more comma-separated pairs) leaves it.
pub fn apply(registry: &Registry, values: &[String]) -> Result<Registry, String> {
    let mut out = registry.clone();
    for pair in values.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let on = if value.is_empty() {
            true
        } else {
            parse_bool(value)
                .ok_or_else(|| format!("--runtime-config: invalid value of {key}: {value:?}, err: not a boolean"))?
        };
        let parts: Vec<&str> = key.split('/').collect();
        let (group, version, resource) = match parts.as_slice() {
            ["api", "all" | "ga" | "beta" | "alpha"] => {
                return Err(format!(
                    "--runtime-config: {key} is not supported by kustos (every version it has is served)"
                ))
            }
            ["v1"] | ["api", "v1", ..] => {
                return Err(format!("--runtime-config: {key}: the core API cannot be turned off in kustos"))
            }
            [group, version] => (*group, *version, None),
            [group, version, resource] => (*group, *version, Some(*resource)),
            _ => return Err(format!("--runtime-config: unexpected key {key:?} (want GROUP/VERSION[/RESOURCE])")),
        };
        let matches = |d: &super::ResourceDef| {
            d.group == group && d.version == version && resource.is_none_or(|r| d.resource == r)
        };
        if !registry.resources.iter().any(matches) {
            let what = match resource {
                Some(r) => format!("resource {r} in {group}/{version}"),
                None => format!("group version {group}/{version}"),
            };
            return Err(format!("--runtime-config: kustos serves no {what}"));
        }
        if !on {
            out.resources.retain(|d| !matches(d));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn served(reg: &Registry, g: &str, v: &str, r: &str) -> bool {
        reg.find(g, v, r).is_some()
    }

    #[test]
    fn turning_off_versions_and_resources() {
        let all = Registry::builtin();
        let pcr = ("certificates.k8s.io", "podcertificaterequests");
        // (flag values, then whether v1 and v1beta1 PodCertificateRequests and v1 CSRs stay served)
        let cases: &[(&[&str], [bool; 3])] = &[
            (&[], [true, true, true]),
            (&["certificates.k8s.io/v1/podcertificaterequests=false"], [false, true, true]),
            (&["certificates.k8s.io/v1beta1/podcertificaterequests=false"], [true, false, true]),
            (&["certificates.k8s.io/v1=false"], [false, true, false]),
            (&["certificates.k8s.io/v1/podcertificaterequests=f,certificates.k8s.io/v1beta1=0"], [false, false, true]),
            (
                &["certificates.k8s.io/v1/podcertificaterequests=false", "certificates.k8s.io/v1=true"],
                [false, true, true],
            ),
            (&["certificates.k8s.io/v1/podcertificaterequests"], [true, true, true]),
        ];
        for (values, [v1, v1beta1, csr]) in cases {
            let values: Vec<String> = values.iter().map(ToString::to_string).collect();
            let reg = apply(&all, &values).unwrap();
            assert_eq!(served(&reg, pcr.0, "v1", pcr.1), *v1, "{values:?}: v1");
            assert_eq!(served(&reg, pcr.0, "v1beta1", pcr.1), *v1beta1, "{values:?}: v1beta1");
            assert_eq!(served(&reg, pcr.0, "v1", "certificatesigningrequests"), *csr, "{values:?}: CSRs");
            assert!(served(&reg, "", "v1", "configmaps"), "{values:?}: the rest stays");
        }
    }

    #[test]
    fn what_is_refused() {
        let all = Registry::builtin();
        let cases: &[(&str, &str)] = &[
            ("api/all=false", "--runtime-config: api/all is not supported by kustos (every version it has is served)"),
            ("api/beta=true", "--runtime-config: api/beta is not supported by kustos (every version it has is served)"),
            ("v1=false", "--runtime-config: v1: the core API cannot be turned off in kustos"),
            ("api/v1/configmaps=false", "--runtime-config: api/v1/configmaps: the core API cannot be turned off in kustos"),
            ("certificates.k8s.io/v2=false", "--runtime-config: kustos serves no group version certificates.k8s.io/v2"),
            (
                "certificates.k8s.io/v1/widgets=false",
                "--runtime-config: kustos serves no resource widgets in certificates.k8s.io/v1",
            ),
            (
                "certificates.k8s.io/v1/podcertificaterequests=maybe",
                "--runtime-config: invalid value of certificates.k8s.io/v1/podcertificaterequests: \"maybe\", err: not a boolean",
            ),
            ("a/b/c/d=false", "--runtime-config: unexpected key \"a/b/c/d\" (want GROUP/VERSION[/RESOURCE])"),
            ("certificates.k8s.io=false", "--runtime-config: unexpected key \"certificates.k8s.io\" (want GROUP/VERSION[/RESOURCE])"),
        ];
        for (flag, want) in cases {
            assert_eq!(apply(&all, &[flag.to_string()]).err().as_deref(), Some(*want), "{flag}");
        }
    }
}
