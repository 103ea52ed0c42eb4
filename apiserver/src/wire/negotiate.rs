//! Content negotiation: what the client accepts (JSON, YAML, protobuf, Table) and what it sent.
//!
//! The Accept header's media ranges are tried in order. A range with `as=Table`,
//! `as=PartialObjectMetadata` or `as=PartialObjectMetadataList` (`g=meta.k8s.io`, `v=v1` or
//! `v1beta1`) asks for the object converted to that `meta.k8s.io` kind; [`Output`] keeps the
//! kind and version asked, as upstream's `MediaTypeOptions.Convert` does, so that each handler
//! converts as upstream's would (a watch converts every event but ERROR; see `api/watch.rs`).
//! `application/vnd.kubernetes.protobuf` is served for kinds with a protobuf form (every
//! built-in kind; the caller says whether the endpoint's kind has one) and, whatever the kind,
//! for `PartialObjectMetadata[List]`; as upstream, custom resources and `Table` have no
//! protobuf form, so such a range is passed over like one with an unknown `as`, for the next
//! range (client-go's `application/vnd.kubernetes.protobuf,application/json` gets JSON); none
//! left → 406.

use crate::error::ApiError;

/// How a response body should be rendered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// `as=Table` was asked (and Table is the best match).
    pub table: bool,
    /// `as=PartialObjectMetadata` / `PartialObjectMetadataList`.
    pub metadata_only: bool,
    /// Of those, `as=PartialObjectMetadataList` was the one asked.
    pub metadata_list: bool,
    /// The `meta.k8s.io` version asked for the converted form (`v=`).
    pub meta_version: MetaVersion,
    /// `application/yaml`.
    pub yaml: bool,
    /// `application/vnd.kubernetes.protobuf`.
    pub protobuf: bool,
}

/// The version of `meta.k8s.io` a `Table` or `PartialObjectMetadata` is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetaVersion {
    #[default]
    V1,
    V1beta1,
}

impl MetaVersion {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

impl Output {
    /// `apiVersion` of a `Table` or `PartialObjectMetadata` this output asks for.
    pub fn meta_api_version(&self) -> &'static str {
        self.meta_version.api_version()
    }
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

/// Pick the output form from the Accept header. `None`/empty accepts JSON. `protobuf`: the
/// endpoint's kind has a protobuf form (a built-in kind; not a custom resource).
pub fn negotiate(accept: Option<&str>, protobuf: bool) -> Result<Output, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Output::default());
    };
    for r in parse_accept(accept) {
        let json_like = matches!(r.essence.as_str(), "application/json" | "*/*" | "application/*");
        let is_protobuf = r.essence == crate::wire::protobuf::MEDIA_TYPE;
        if r.essence == "application/yaml" && r.param("as").is_none() {
            return Ok(Output { yaml: true, ..Default::default() });
        }
        if !json_like && !is_protobuf {
            continue;
        }
        let Some(kind) = r.param("as") else {
            if is_protobuf && !protobuf {
                continue;
            }
            return Ok(Output { protobuf: is_protobuf, ..Default::default() });
        };
        let g_ok = r.param("g").is_none_or(|g| g == "meta.k8s.io");
        let meta_version = match r.param("v") {
            None | Some("v1") => MetaVersion::V1,
            Some("v1beta1") => MetaVersion::V1beta1,
            Some(_) => continue,
        };
        if !g_ok {
            continue;
        }
        match kind {
            // Table is served as JSON (and YAML) only, as upstream.
            "Table" if !is_protobuf => return Ok(Output { table: true, meta_version, ..Default::default() }),
            "PartialObjectMetadata" | "PartialObjectMetadataList" => {
                return Ok(Output {
                    metadata_only: true,
                    metadata_list: kind == "PartialObjectMetadataList",
                    meta_version,
                    protobuf: is_protobuf,
                    ..Default::default()
                })
            }
            _ => continue,
        }
    }
    let types = if protobuf {
        "application/json, application/yaml, application/vnd.kubernetes.protobuf"
    } else {
        "application/json, application/yaml"
    };
    Err(ApiError::NotAcceptable(format!(
        "only the following media types are accepted: {types}, application/json;as=Table;g=meta.k8s.io;v=v1 (got {accept:?})"
    )))
}

/// Whether a `Status` (an error answer) goes out as protobuf for this Accept header: of the
/// ranges without an `as` conversion (upstream's `ErrorNegotiated` allows none), the first
/// one kustos serves is protobuf.
pub fn status_as_protobuf(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    for r in parse_accept(accept) {
        if r.param("as").is_some() {
            continue;
        }
        match r.essence.as_str() {
            crate::wire::protobuf::MEDIA_TYPE => return true,
            "application/json" | "application/yaml" | "*/*" | "application/*" => return false,
            _ => continue,
        }
    }
    false
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
            (
                "client-go: protobuf first",
                Some("application/vnd.kubernetes.protobuf,application/json"),
                Ok(Output { protobuf: true, ..Default::default() }),
            ),
            ("protobuf only", Some("application/vnd.kubernetes.protobuf"), Ok(Output { protobuf: true, ..Default::default() })),
            ("json first", Some("application/json, application/vnd.kubernetes.protobuf"), Ok(Output::default())),
            ("yaml", Some("application/yaml"), Ok(Output { yaml: true, ..Default::default() })),
            ("unknown as falls back", Some("application/json;as=Foo;g=x;v=v1, application/json"), Ok(Output::default())),
            (
                "metadata list",
                Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                Ok(Output { metadata_only: true, metadata_list: true, ..Default::default() }),
            ),
            (
                "metadata object",
                Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
                Ok(Output { metadata_only: true, ..Default::default() }),
            ),
            (
                "metadata v1beta1",
                Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"),
                Ok(Output { metadata_only: true, meta_version: MetaVersion::V1beta1, ..Default::default() }),
            ),
            (
                "client-go metadata informer: protobuf",
                Some("application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"),
                Ok(Output { metadata_only: true, protobuf: true, ..Default::default() }),
            ),
            (
                "metadata list as protobuf",
                Some("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                Ok(Output { metadata_only: true, metadata_list: true, protobuf: true, ..Default::default() }),
            ),
            (
                "table is never protobuf",
                Some("application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1,application/json;as=Table;g=meta.k8s.io;v=v1"),
                Ok(Output { table: true, ..Default::default() }),
            ),
            ("table as protobuf only", Some("application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1"), Err(())),
            (
                "metadata in another group falls back",
                Some("application/json;as=PartialObjectMetadata;g=example.com;v=v1,application/json"),
                Ok(Output::default()),
            ),
            (
                "metadata in an unknown version is not acceptable",
                Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v2"),
                Err(()),
            ),
            (
                "table v1beta1",
                Some("application/json;as=Table;g=meta.k8s.io;v=v1beta1"),
                Ok(Output { table: true, meta_version: MetaVersion::V1beta1, ..Default::default() }),
            ),
        ];
        for (name, accept, want) in cases {
            let got = negotiate(*accept, true).map_err(|_| ());
            assert_eq!(&got, want, "{name}");
        }
    }

    #[test]
    fn kinds_without_protobuf_fall_back_to_json_or_are_not_acceptable() {
        let cases: &[(&str, &str, Result<Output, ()>)] = &[
            ("client-go: JSON", "application/vnd.kubernetes.protobuf,application/json", Ok(Output::default())),
            ("protobuf only: 406", "application/vnd.kubernetes.protobuf", Err(())),
            (
                "metadata is protobuf for every kind",
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
                Ok(Output { metadata_only: true, protobuf: true, ..Default::default() }),
            ),
        ];
        for (name, accept, want) in cases {
            assert_eq!(&negotiate(Some(accept), false).map_err(|_| ()), want, "{name}");
        }
        let err = negotiate(Some("application/vnd.kubernetes.protobuf"), false).expect_err("406");
        assert_eq!(err.code().as_u16(), 406);
    }

    #[test]
    fn errors_are_protobuf_when_the_first_plain_range_is() {
        let cases: &[(Option<&str>, bool)] = &[
            (None, false),
            (Some("application/json"), false),
            (Some("application/vnd.kubernetes.protobuf,application/json"), true),
            (Some("application/vnd.kubernetes.protobuf"), true),
            (Some("application/json,application/vnd.kubernetes.protobuf"), false),
            (Some("*/*"), false),
            // Conversions are not applied to errors: those ranges are passed over.
            (
                Some(
                    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
                ),
                false,
            ),
            (Some("application/json;as=Table;g=meta.k8s.io;v=v1,application/vnd.kubernetes.protobuf"), true),
        ];
        for (accept, want) in cases {
            assert_eq!(status_as_protobuf(*accept), *want, "{accept:?}");
        }
    }
}
