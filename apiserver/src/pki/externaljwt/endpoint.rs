//! Where an external signer listens: `--service-account-signing-endpoint` (and
//! `kustos sa-signer --socket`). In: the flag's text. Out: a Unix socket address to connect to
//! or bind, checked as kube-apiserver checks the flag: an absolute path, or `@name` for a
//! socket in Linux's abstract namespace; letters, digits, `_`, `.`, `-` and `/` only.

use std::os::linux::net::SocketAddrExt as _;
use std::path::{Path, PathBuf};

/// A Unix socket: a file, or a name in the abstract namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Path(PathBuf),
    /// The name without its `@`.
    Abstract(String),
}

/// Longest socket path the kernel takes (`sun_path` holds 108 bytes, the last a NUL).
const MAX_PATH_BYTES: usize = 107;

impl Endpoint {
    /// The flag's value, checked. The error is kube-apiserver's message.
    pub fn parse(value: &str) -> Result<Endpoint, String> {
        let invalid = || {
            format!(
                "invalid value {value:?} passed for `--service-account-signing-endpoint`, should be a valid location on the filesystem or must be prefixed with @ to name UDS in abstract namespace"
            )
        };
        let (first, rest) = match value.as_bytes().split_first() {
            Some((b, rest)) if *b == b'/' || *b == b'@' => (*b, rest),
            _ => return Err(invalid()),
        };
        let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/');
        if !rest.iter().all(allowed) || value.len() > MAX_PATH_BYTES {
            return Err(invalid());
        }
        if first == b'@' {
            if rest.is_empty() {
                return Err(invalid());
            }
            return Ok(Endpoint::Abstract(String::from_utf8_lossy(rest).into_owned()));
        }
        Ok(Endpoint::Path(PathBuf::from(value)))
    }

    /// The socket address.
    pub fn socket_addr(&self) -> std::io::Result<std::os::unix::net::SocketAddr> {
        match self {
            Endpoint::Path(p) => std::os::unix::net::SocketAddr::from_pathname(p),
            Endpoint::Abstract(name) => std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()),
        }
    }

    /// The file of a path socket.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Endpoint::Path(p) => Some(p),
            Endpoint::Abstract(_) => None,
        }
    }

    /// Connect.
    pub async fn connect(&self) -> std::io::Result<tokio::net::UnixStream> {
        tokio::net::UnixStream::connect_addr(&self.socket_addr()?.into()).await
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Path(p) => write!(f, "{}", p.display()),
            Endpoint::Abstract(name) => write!(f, "@{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_as_kube_apiserver_takes_them() {
        let cases: &[(&str, Option<Endpoint>)] = &[
            ("/e/an_b-d/efg", Some(Endpoint::Path("/e/an_b-d/efg".into()))),
            ("/run/kustos/sa-signer.sock", Some(Endpoint::Path("/run/kustos/sa-signer.sock".into()))),
            ("@ebc.sock", Some(Endpoint::Abstract("ebc.sock".into()))),
            ("@ebc.eng.hij", Some(Endpoint::Abstract("ebc.eng.hij".into()))),
            ("abc", None),
            ("@abc@", None),
            ("@abc.abc  .ae", None),
            ("/@e_adnb/xyz /efg", None),
            ("/e /xyz /efg", None),
            ("", None),
            ("@", None),
            ("relative/path.sock", None),
            ("/tmp/ünicode", None),
            ("/tmp/a\0b", None),
        ];
        for (value, want) in cases {
            let got = Endpoint::parse(value);
            assert_eq!(got.as_ref().ok(), want.as_ref(), "{value:?}: {got:?}");
            if want.is_none() {
                let msg = got.unwrap_err();
                assert!(
                    msg.starts_with(&format!(
                        "invalid value {value:?} passed for `--service-account-signing-endpoint`"
                    )),
                    "{msg}"
                );
            }
        }
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        assert!(Endpoint::parse(&long).is_err(), "longer than a socket path may be");
        assert_eq!(Endpoint::parse("@x.y").unwrap().to_string(), "@x.y");
    }
}
