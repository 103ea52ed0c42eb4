//! Content negotiation: what the client accepts (JSON, YAML, Table) and what it sent.

use crate::error::ApiError;

/// How a response body should be rendered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// `as=Table` was asked (and Table is the best match).
    pub table: bool,
    /// `as=PartialObjectMetadata` / `PartialObjectMetadataList`.
    pub metadata_only: bool,
    /// `application/yaml`.
    pub yaml: bool,
}

/// One media range of an Accept header.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MediaRange {
    essence: String,
    params: Vec<(String, String)>,
}

fn parse_accept(accept: &str) -> Vec<MediaRange> {
    accept
        .split(',')
        .filter_map(|part| {
            let mut it = part.split(';');
            let essence = it.next()?.trim().to_ascii_lowercase();
            if essence.is_empty() {
                return None;
            }
            let params = it
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_string()))
                })
                .collect();
            Some(MediaRange { essence, params })
        })
        .collect()
}

impl MediaRange {
    fn param(&self, k: &str) -> Option<&str> {
        self.params.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.as_str())
    }
}

/// Pick the output form from the Accept header. `None`/empty accepts JSON.
pub fn negotiate(accept: Option<&str>) -> Result<Output, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Output::default());
    };
    for r in parse_accept(accept) {
        let json_like = matches!(r.essence.as_str(), "application/json" | "*/*" | "application/*");
        if r.essence == "application/yaml" && r.param("as").is_none() {
            return Ok(Output { yaml: true, ..Default::default() });
        }
        if !json_like {
            continue;
        }
        match r.param("as") {
            None => return Ok(Output::default()),
            Some("Table") => {
                let g_ok = r.param("g").is_none_or(|g| g == "meta.k8s.io");
                let v_ok = r.param("v").is_none_or(|v| v == "v1" || v == "v1beta1");
                if g_ok && v_ok {
                    return Ok(Output { table: true, ..Default::default() });
                }
            }
            Some("PartialObjectMetadata") | Some("PartialObjectMetadataList") => {
                let g_ok = r.param("g").is_none_or(|g| g == "meta.k8s.io");
                let v_ok = r.param("v").is_none_or(|v| v == "v1" || v == "v1beta1");
                if g_ok && v_ok {
                    return Ok(Output { metadata_only: true, ..Default::default() });
                }
            }
            Some(_) => continue,
        }
    }
    Err(ApiError::NotAcceptable(format!(
        "only the following media types are accepted: application/json, application/yaml, application/json;as=Table;g=meta.k8s.io;v=v1 (got {accept:?})"
    )))
}

/// The media type of a request body: `json`, `yaml` or the patch kinds.
pub fn essence(content_type: Option<&str>) -> String {
    content_type.and_then(|c| c.split(';').next()).map(|s| s.trim().to_ascii_lowercase()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_first_acceptable_media_range() {
        let cases: &[(&str, Option<&str>, Result<Output, ()>)] = &[
            ("no accept", None, Ok(Output::default())),
            ("json", Some("application/json"), Ok(Output::default())),
            ("anything", Some("*/*"), Ok(Output::default())),
            (
                "kubectl get table",
                Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"),
                Ok(Output { table: true, ..Default::default() }),
            ),
            ("protobuf with json fallback", Some("application/vnd.kubernetes.protobuf, application/json"), Ok(Output::default())),
            ("protobuf only", Some("application/vnd.kubernetes.protobuf"), Err(())),
            ("yaml", Some("application/yaml"), Ok(Output { yaml: true, ..Default::default() })),
            ("unknown as falls back", Some("application/json;as=Foo;g=x;v=v1, application/json"), Ok(Output::default())),
            (
                "metadata",
                Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                Ok(Output { metadata_only: true, ..Default::default() }),
            ),
        ];
        for (name, accept, want) in cases {
            let got = negotiate(*accept).map_err(|_| ());
            assert_eq!(&got, want, "{name}");
        }
    }
}
