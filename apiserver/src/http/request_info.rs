//! Request info: what a request is about (verb, group, version, resource, namespace, name,
//! subresource), resolved from method, path and query like upstream's RequestInfoResolver.
//! Authorization and the REST handlers both read it.

use http::Method;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// False for `/healthz`, `/api`, `/apis/<group>`, `/openapi/...` and other non-resource paths.
    pub is_resource_request: bool,
    pub path: String,
    /// get, list, watch, create, update, patch, delete, deletecollection (resource requests);
    /// the lowercase HTTP method for non-resource requests.
    pub verb: String,
    pub api_prefix: String,
    pub api_group: String,
    pub api_version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// Path segments after the resource/name/subresource that no route uses (→ 404).
    pub extra_parts: usize,
    /// The `User-Agent` header (empty when absent): writes without `?fieldManager=` are
    /// recorded in `metadata.managedFields` under its first part.
    pub user_agent: String,
    /// The node a list or watch is pinned to by a `spec.nodeName=<node>` field selector
    /// (empty otherwise): a node may list and watch only the pods bound to it.
    pub selected_node: String,
}

/// True if the query string asks for a watch (`watch=1` or `watch=true`).
pub fn is_watch(query: Option<&str>) -> bool {
    query_param(query, "watch").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// First value of `key` in a raw query string, percent-decoded.
pub fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    let q = query?;
    url_pairs(q).into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Decode `a=b&c=d` with `+` and `%XX` decoding; malformed escapes are kept literally.
pub fn url_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub fn percent_decode(s: &str) -> String {
    decode_escapes(s, true)
}

/// A URL path's `%XX` escapes decoded (`+` is itself in a path), as Go's `URL.Path` holds it.
pub fn percent_decode_path(s: &str) -> String {
    decode_escapes(s, false)
}

fn decode_escapes(s: &str, plus_is_space: bool) -> String {
    let escaped = s.contains('%') || (plus_is_space && s.contains('+'));
    if !escaped {
        return s.to_string();
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Resolve a request like upstream: `/api/v1/...` and `/apis/<group>/<version>/...`.
pub fn resolve(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
    let mut info = RequestInfo { path: path.to_string(), verb: method.as_str().to_lowercase(), ..Default::default() };
    // Segments are read from the decoded path, as upstream's (Go's `URL.Path`): a name sent
    // as `system%3Anode` (the Python client escapes `:`) is `system:node`.
    let decoded = percent_decode_path(path);
    let parts: Vec<&str> = decoded.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let (prefix, rest) = match parts.first() {
        Some(&"api") => ("api", &parts[1..]),
        Some(&"apis") => ("apis", &parts[1..]),
        _ => return info,
    };
    info.api_prefix = prefix.to_string();
    let rest: &[&str] = if prefix == "api" {
        // core: /api/v1/...
        if rest.is_empty() {
            return info;
        }
        info.api_version = rest[0].to_string();
        &rest[1..]
    } else {
        // /apis/<group>/<version>/...
        if rest.len() < 2 {
            return info;
        }
        info.api_group = rest[0].to_string();
        info.api_version = rest[1].to_string();
        &rest[2..]
    };
    if rest.is_empty() {
        // discovery of one group version
        return info;
    }
    info.is_resource_request = true;
    let mut rest = rest.to_vec();
    // namespaces/<ns>/<resource>/... lists <resource> in <ns>; but namespaces/<name> and
    // namespaces/<name>/{status,finalize} are the Namespace object and its subresources.
    if rest[0] == "namespaces" && rest.len() > 1 {
        info.namespace = rest[1].to_string();
        if rest.len() > 2 && rest[2] != "status" && rest[2] != "finalize" {
            rest.drain(..2);
        }
    }
    info.resource = rest[0].to_string();
    if rest.len() >= 2 {
        info.name = rest[1].to_string();
    }
    if rest.len() >= 3 {
        info.subresource = rest[2].to_string();
    }
    if rest.len() > 3 {
        info.extra_parts = rest.len() - 3;
    }
    info.verb = match *method {
        Method::GET | Method::HEAD => {
            if is_watch(query) {
                "watch".into()
            } else if info.name.is_empty() {
                "list".into()
            } else {
                "get".into()
            }
        }
        Method::POST => "create".into(),
        Method::PUT => "update".into(),
        Method::PATCH => "patch".into(),
        Method::DELETE => {
            if info.name.is_empty() {
                "deletecollection".into()
            } else {
                "delete".into()
            }
        }
        _ => method.as_str().to_lowercase(),
    };
    // As upstream: a list or watch pinned to one name by a `metadata.name=<name>` field
    // selector is about that object (authorizers see its name: a node reads its own Node so),
    // and one pinned to a node by `spec.nodeName=<node>` carries that node.
    if matches!(info.verb.as_str(), "list" | "watch") {
        let selector = query_param(query, "fieldSelector");
        if let Some(parsed) =
            selector.as_deref().and_then(|s| crate::machinery::selectors::FieldSelector::parse(s).ok())
        {
            let name = parsed.requires_exact_match("metadata.name");
            if let Some(name) = name.filter(|n| crate::validation::validate_path_segment_name(n).is_empty()) {
                info.name = name.to_string();
            }
            info.selected_node = parsed.requires_exact_match("spec.nodeName").unwrap_or_default().to_string();
        }
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Case {
        name: &'static str,
        method: Method,
        path: &'static str,
        query: Option<&'static str>,
        want: (&'static str, &'static str, &'static str, &'static str, &'static str, &'static str),
    }

    #[test]
    fn resolves_paths_like_upstream() {
        // want: (verb, group, namespace, resource, name, subresource)
        let cases = [
            Case {
                name: "an escaped name is read decoded",
                method: Method::GET,
                path: "/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Abasic-user",
                query: None,
                want: ("get", "rbac.authorization.k8s.io", "", "clusterroles", "system:basic-user", ""),
            },
            Case {
                name: "a plus in a path is a plus",
                method: Method::GET,
                path: "/api/v1/namespaces/ns/configmaps/a+b",
                query: None,
                want: ("get", "", "ns", "configmaps", "a+b", ""),
            },
            Case {
                name: "core list all namespaces",
                method: Method::GET,
                path: "/api/v1/configmaps",
                query: None,
                want: ("list", "", "", "configmaps", "", ""),
            },
            Case {
                name: "core namespaced get",
                method: Method::GET,
                path: "/api/v1/namespaces/default/configmaps/a",
                query: None,
                want: ("get", "", "default", "configmaps", "a", ""),
            },
            Case {
                name: "watch by query",
                method: Method::GET,
                path: "/api/v1/namespaces/default/configmaps",
                query: Some("watch=true"),
                want: ("watch", "", "default", "configmaps", "", ""),
            },
            Case {
                name: "namespace object",
                method: Method::GET,
                path: "/api/v1/namespaces/kube-system",
                query: None,
                want: ("get", "", "kube-system", "namespaces", "kube-system", ""),
            },
            Case {
                name: "namespace status",
                method: Method::PUT,
                path: "/api/v1/namespaces/foo/status",
                query: None,
                want: ("update", "", "foo", "namespaces", "foo", "status"),
            },
            Case {
                name: "namespace finalize",
                method: Method::PUT,
                path: "/api/v1/namespaces/foo/finalize",
                query: None,
                want: ("update", "", "foo", "namespaces", "foo", "finalize"),
            },
            Case {
                name: "group cluster subresource",
                method: Method::PUT,
                path: "/apis/certificates.k8s.io/v1/certificatesigningrequests/c/approval",
                query: None,
                want: ("update", "certificates.k8s.io", "", "certificatesigningrequests", "c", "approval"),
            },
            Case {
                name: "create",
                method: Method::POST,
                path: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
                query: None,
                want: ("create", "coordination.k8s.io", "kube-system", "leases", "", ""),
            },
            Case {
                name: "deletecollection",
                method: Method::DELETE,
                path: "/api/v1/namespaces/x/secrets",
                query: None,
                want: ("deletecollection", "", "x", "secrets", "", ""),
            },
            Case {
                name: "delete",
                method: Method::DELETE,
                path: "/api/v1/namespaces/x/secrets/s",
                query: None,
                want: ("delete", "", "x", "secrets", "s", ""),
            },
            Case {
                name: "patch",
                method: Method::PATCH,
                path: "/api/v1/namespaces/x/secrets/s",
                query: None,
                want: ("patch", "", "x", "secrets", "s", ""),
            },
            Case {
                name: "list pinned by name",
                method: Method::GET,
                path: "/api/v1/nodes",
                query: Some("fieldSelector=metadata.name%3Dn1"),
                want: ("list", "", "", "nodes", "n1", ""),
            },
            Case {
                name: "watch pinned by name among other terms",
                method: Method::GET,
                path: "/api/v1/nodes",
                query: Some("watch=1&fieldSelector=spec.unschedulable%3Dfalse,metadata.name%3D%3Dn1"),
                want: ("watch", "", "", "nodes", "n1", ""),
            },
            Case {
                name: "not-equal does not pin",
                method: Method::GET,
                path: "/api/v1/nodes",
                query: Some("fieldSelector=metadata.name!%3Dn1"),
                want: ("list", "", "", "nodes", "", ""),
            },
            Case {
                name: "a name that is no path segment does not pin",
                method: Method::GET,
                path: "/api/v1/nodes",
                query: Some("fieldSelector=metadata.name%3Da/b"),
                want: ("list", "", "", "nodes", "", ""),
            },
            Case {
                name: "a malformed selector does not pin",
                method: Method::GET,
                path: "/api/v1/nodes",
                query: Some("fieldSelector=metadata.name"),
                want: ("list", "", "", "nodes", "", ""),
            },
        ];
        for c in cases {
            let i = resolve(&c.method, c.path, c.query);
            assert!(i.is_resource_request, "{}", c.name);
            let got = (
                i.verb.as_str(),
                i.api_group.as_str(),
                i.namespace.as_str(),
                i.resource.as_str(),
                i.name.as_str(),
                i.subresource.as_str(),
            );
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn non_resource_paths_are_not_resource_requests() {
        for p in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/rbac.authorization.k8s.io",
            "/apis/rbac.authorization.k8s.io/v1",
            "/healthz",
            "/openapi/v2",
            "/version",
        ] {
            let i = resolve(&Method::GET, p, None);
            assert!(!i.is_resource_request, "{p}");
            assert_eq!(i.verb, "get", "{p}");
        }
    }

    #[test]
    fn percent_decoding_handles_escapes_and_garbage() {
        assert_eq!(percent_decode("a%3Db%2Cc"), "a=b,c");
        assert_eq!(percent_decode("x+y"), "x y");
        assert_eq!(percent_decode("bad%zz%"), "bad%zz%");
        assert_eq!(query_param(Some("labelSelector=app%3Dweb&limit=5"), "labelSelector").as_deref(), Some("app=web"));
    }
}
