//! Sealing the shared record: the shared files and the record's generation in, the value
//! stored in etcd out (and back).
//!
//! The value is `{"sealed": base64(nonce ‖ AES-256-GCM(plaintext) ‖ tag)}`, with the record's
//! key ([`RECORD_KEY`]) as associated data. The plaintext is
//! `{"generation": N, "files": {name: base64}}`: the generation is inside the authenticated
//! part, so nobody without the key can change it. A record sealed before generations existed
//! holds the bare `{name: base64}` map; it opens with generation `None`.

use std::collections::BTreeMap;

use anyhow::{bail, Context as _};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::aead;
use ring::rand::{SecureRandom as _, SystemRandom};
use serde::{Deserialize, Serialize};

use super::{Files, RECORD_KEY, SEAL_KEY_FILE, SHARED};

/// A key that seals the record (`sync.key`, `sync-next.key`, `sync-prev.key`).
pub struct SealKey(aead::LessSafeKey);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

/// The record as stored.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    /// base64 of the 12-byte nonce followed by the AES-256-GCM ciphertext and tag.
    sealed: String,
}

/// The plaintext of a record with a generation.
#[derive(Serialize, Deserialize)]
struct Plain {
    generation: u64,
    files: BTreeMap<String, String>,
}

/// What a record holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub files: Files,
    /// `None`: sealed before records had a generation.
    pub generation: Option<u64>,
}

/// The 32 bytes of a key file's text.
fn key_bytes(text: &str) -> anyhow::Result<Vec<u8>> {
    let bytes = B64.decode(text.trim()).context("not base64")?;
    if bytes.len() != 32 {
        bail!("holds {} bytes, not 32", bytes.len());
    }
    Ok(bytes)
}

/// A name for the key of `text` that tells keys apart and says nothing about them: the first
/// 16 hex digits of SHA-256 over the key.
pub fn key_id(text: &str) -> anyhow::Result<String> {
    let digest = kustos_ca::fingerprint(&key_bytes(text)?);
    Ok(digest[..16].to_string())
}

impl SealKey {
    pub fn from_text(text: &str) -> anyhow::Result<SealKey> {
        let bytes = key_bytes(text)?;
        let key = aead::UnboundKey::new(&aead::AES_256_GCM, &bytes).map_err(|_| anyhow::anyhow!("not a key"))?;
        Ok(SealKey(aead::LessSafeKey::new(key)))
    }

    /// A new random key, and its text for a key file.
    pub fn generate() -> anyhow::Result<(SealKey, String)> {
        let mut bytes = [0u8; 32];
        SystemRandom::new().fill(&mut bytes).map_err(|_| anyhow::anyhow!("no random bytes"))?;
        let text = format!("{}\n", B64.encode(bytes));
        Ok((SealKey::from_text(&text)?, text))
    }

    /// The record's value for `files` at `generation`.
    pub fn seal(&self, files: &Files, generation: u64) -> anyhow::Result<Vec<u8>> {
        let plain = Plain { generation, files: files.iter().map(|(n, b)| (n.clone(), B64.encode(b))).collect() };
        let mut data = serde_json::to_vec(&plain).context("encoding the shared files")?;
        let mut nonce = [0u8; aead::NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).map_err(|_| anyhow::anyhow!("no random bytes"))?;
        self.0
            .seal_in_place_append_tag(aead::Nonce::assume_unique_for_key(nonce), aead::Aad::from(RECORD_KEY), &mut data)
            .map_err(|_| anyhow::anyhow!("sealing the shared files failed"))?;
        let mut sealed = nonce.to_vec();
        sealed.extend(data);
        serde_json::to_vec(&Record { sealed: B64.encode(sealed) }).context("encoding the record")
    }

    /// What a record's value holds; an error when it was not sealed with this key.
    pub fn open(&self, value: &[u8]) -> anyhow::Result<Opened> {
        let record: Record = serde_json::from_slice(value).context("the record does not parse")?;
        let mut sealed = B64.decode(record.sealed).context("the record is not base64")?;
        if sealed.len() < aead::NONCE_LEN {
            bail!("the record is too short");
        }
        let mut nonce = [0u8; aead::NONCE_LEN];
        nonce.copy_from_slice(&sealed[..aead::NONCE_LEN]);
        let data = &mut sealed[aead::NONCE_LEN..];
        let plain = self
            .0
            .open_in_place(aead::Nonce::assume_unique_for_key(nonce), aead::Aad::from(RECORD_KEY), data)
            .map_err(|_| anyhow::anyhow!("the record was sealed with another key than this {SEAL_KEY_FILE}"))?;
        let value: serde_json::Value = serde_json::from_slice(plain).context("the sealed files do not parse")?;
        let (files, generation) = match value.get("generation").and_then(serde_json::Value::as_u64) {
            Some(_) => {
                let p: Plain = serde_json::from_value(value).context("the sealed files do not parse")?;
                (p.files, Some(p.generation))
            }
            None => (serde_json::from_value(value).context("the sealed files do not parse")?, None),
        };
        let files = files
            .into_iter()
            .filter(|(n, _)| SHARED.iter().any(|f| f.name == *n))
            .map(|(n, b)| Ok((n, B64.decode(b).context("a sealed file is not base64")?)))
            .collect::<anyhow::Result<Files>>()?;
        Ok(Opened { files, generation })
    }

    /// A value sealed as records were before they had a generation (for tests of the
    /// migration).
    #[cfg(test)]
    pub fn seal_without_generation(&self, files: &Files) -> Vec<u8> {
        let plain: BTreeMap<&String, String> = files.iter().map(|(n, b)| (n, B64.encode(b))).collect();
        let mut data = serde_json::to_vec(&plain).unwrap_or_default();
        let nonce = [7u8; aead::NONCE_LEN];
        let _ = self.0.seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(RECORD_KEY),
            &mut data,
        );
        let mut sealed = nonce.to_vec();
        sealed.extend(data);
        serde_json::to_vec(&Record { sealed: B64.encode(sealed) }).unwrap_or_default()
    }
}
