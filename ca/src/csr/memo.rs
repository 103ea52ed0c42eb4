//! The memo of request reads: each distinct request is parsed, and its self-signature
//! checked, once per process, however many readers look at it.
//!
//! A request travels through several readers: in `kustos server` the apiserver's admission
//! (NodeRestriction, CertificateSubjectRestriction) and validation read it at create, then
//! the approvers read it and the signer reads it again, all in one process; in
//! `kustos controller-manager` the approvers and the signer read it from their informers'
//! copies. The readers only share the stored bytes, so the memo is keyed by them: the
//! SHA-256 of the exact input (the PEM as given, or the DER for [`super::parse_der`]; the
//! two forms are keyed apart). What a read answers depends on those bytes alone, so a hit
//! is the answer a fresh read gives, bit for bit: errors and messages included.
//!
//! A memoised read always checks the self-signature, even for an unverified reader: on
//! every path a request takes, an unverified read (admission, the approvers) is followed by
//! a verified one (validation, the signer), so checking at the first read moves the one
//! check earlier instead of adding a second parse later. The unverified answer does not
//! depend on the verdict ([`super::Read::answer`]).
//!
//! Bounds (a client chooses the bytes): only inputs up to [`MAX_INPUT`] bytes are kept
//! (larger ones are read afresh at every call, as before); at most [`MAX_ENTRIES`] entries
//! and [`MAX_BYTES`] bytes of what they hold ([`super::Read::weight`]). Eviction is
//! first in, first out: a client flooding distinct requests only pushes others' entries
//! out, which costs their next reader a fresh read of the same answer; it cannot change an
//! answer (a key is a SHA-256 of the bytes read). Two readers missing the same request at
//! once both read it; the first stored answer stays.
//!
//! In: the form and bytes of a request and whether its signature must verify. Out: the
//! answer, and the counters [`counters`] (real parses, real signature checks, hits) for
//! `/metrics`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use sha2::{Digest as _, Sha256};

use super::{CertificateRequest, CsrError, Read};

/// Most entries kept.
pub const MAX_ENTRIES: usize = 1024;
/// Most bytes the kept entries hold.
pub const MAX_BYTES: usize = 8 << 20;
/// Largest input kept (a request with an RSA-4096 key and a few names is about 2 KiB).
pub const MAX_INPUT: usize = 16 << 10;

/// How the bytes of a request come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Pem,
    Der,
}

/// Counts of reads, since the process started.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests parsed (every read that was not a hit).
    pub parses: AtomicU64,
    /// Self-signatures checked.
    pub signature_checks: AtomicU64,
    /// Reads answered from the memo.
    pub hits: AtomicU64,
}

/// A copy of the [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub parses: u64,
    pub signature_checks: u64,
    pub hits: u64,
}

impl Counters {
    fn get(&self) -> Counts {
        Counts {
            parses: self.parses.load(Ordering::Relaxed),
            signature_checks: self.signature_checks.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
        }
    }
}

/// The process' memo.
static MEMO: LazyLock<Memo> = LazyLock::new(|| Memo::new(Limits::DEFAULT));

/// The process' counts of request reads.
pub fn counters() -> Counts {
    MEMO.counters.get()
}

/// The counters in the Prometheus text format (each a `# HELP`, `# TYPE` and one sample),
/// for a `/metrics` endpoint to append.
pub fn metrics_text() -> String {
    let c = counters();
    let mut text = String::new();
    for (name, help, value) in [
        ("kustos_csr_parses", "Certificate signing requests parsed (reads the memo did not answer).", c.parses),
        ("kustos_csr_signature_checks", "Self-signatures of certificate signing requests checked.", c.signature_checks),
        ("kustos_csr_parse_cache_hits", "Reads of certificate signing requests answered by the memo.", c.hits),
    ] {
        text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n{name}_total {value}\n"));
    }
    text
}

/// The answer for `input` read as `form`, with the self-signature checked when `verify`.
pub(super) fn read(form: Form, input: &[u8], verify: bool) -> Result<CertificateRequest, CsrError> {
    MEMO.read(form, input, verify)
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    entries: usize,
    bytes: usize,
    input: usize,
}

impl Limits {
    const DEFAULT: Limits = Limits { entries: MAX_ENTRIES, bytes: MAX_BYTES, input: MAX_INPUT };
}

type Key = [u8; 32];

struct Memo {
    limits: Limits,
    counters: Counters,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    reads: HashMap<Key, (Arc<Read>, usize)>,
    /// Keys, oldest first.
    order: VecDeque<Key>,
    bytes: usize,
}

impl Memo {
    fn new(limits: Limits) -> Memo {
        Memo { limits, counters: Counters::default(), kept: Mutex::new(Kept::default()) }
    }

    fn read(&self, form: Form, input: &[u8], verify: bool) -> Result<CertificateRequest, CsrError> {
        if input.len() > self.limits.input || self.limits.entries == 0 {
            return fresh(form, input, verify, &self.counters);
        }
        let key = key(form, input);
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner).reads.get(&key).map(|(r, _)| r.clone());
        if let Some(answer) = kept.and_then(|r| r.answer(verify)) {
            self.counters.hits.fetch_add(1, Ordering::Relaxed);
            return answer;
        }
        let read = Arc::new(super::read(form, input, true, &self.counters));
        let answer = read.answer(verify);
        self.keep(key, read);
        answer.unwrap_or_else(|| fresh(form, input, verify, &self.counters))
    }

    fn keep(&self, key: Key, read: Arc<Read>) {
        let weight = read.weight();
        if weight > self.limits.bytes {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.reads.contains_key(&key) {
            return;
        }
        while kept.reads.len() >= self.limits.entries || kept.bytes + weight > self.limits.bytes {
            let Some(oldest) = kept.order.pop_front() else { break };
            if let Some((_, w)) = kept.reads.remove(&oldest) {
                kept.bytes -= w;
            }
        }
        kept.reads.insert(key, (read, weight));
        kept.order.push_back(key);
        kept.bytes += weight;
    }

    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        (kept.reads.len(), kept.bytes)
    }
}

/// A read outside the memo: only the check asked for.
fn fresh(form: Form, input: &[u8], verify: bool, counters: &Counters) -> Result<CertificateRequest, CsrError> {
    let read = super::read(form, input, verify, counters);
    read.answer(verify).unwrap_or(read.request)
}

fn key(form: Form, input: &[u8]) -> Key {
    let tag: &[u8] = match form {
        Form::Pem => b"pem\0",
        Form::Der => b"der\0",
    };
    Sha256::new().chain_update(tag).chain_update(input).finalize().into()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::der;

    fn pem_of(der: &[u8]) -> Vec<u8> {
        crate::pem_encode("CERTIFICATE REQUEST", der).into_bytes()
    }

    fn der_of(pem: &[u8]) -> Vec<u8> {
        crate::pem::decode_single(pem).unwrap().bytes
    }

    /// A request signed by a new P-256 key, with a subject of these CNs and O `system:nodes`.
    fn request(cns: &[&str]) -> Vec<u8> {
        let atv = |arcs: &[u64], value: &str| {
            let atv = der::constructed(
                der::TAG_SEQUENCE,
                &[&der::oid(arcs), &der::tlv(der::TAG_UTF8_STRING, value.as_bytes())],
            );
            der::tlv(der::TAG_SET, &atv)
        };
        let mut rdns: Vec<Vec<u8>> = cns.iter().map(|cn| atv(&[2, 5, 4, 3], cn)).collect();
        rdns.push(atv(&[2, 5, 4, 10], "system:nodes"));
        let subject = der::constructed(der::TAG_SEQUENCE, &rdns.iter().map(Vec::as_slice).collect::<Vec<_>>());
        der_of(super::super::tests::csr_with_subject(&subject).as_bytes())
    }

    /// The DER with its signature's last byte flipped.
    fn tampered(mut der: Vec<u8>) -> Vec<u8> {
        let last = der.len() - 1;
        der[last] ^= 1;
        der
    }

    fn cases() -> Vec<(&'static str, Form, Vec<u8>)> {
        let valid = request(&["system:node:a"]);
        let big = [&b"\n".repeat(MAX_INPUT)[..], &pem_of(&valid)].concat();
        vec![
            ("valid", Form::Pem, pem_of(&valid)),
            ("valid DER", Form::Der, valid.clone()),
            ("bad signature", Form::Pem, pem_of(&tampered(valid.clone()))),
            ("bad signature DER", Form::Der, tampered(valid.clone())),
            // Verified: the signature's error; unverified: the subject rule's.
            ("bad signature and two CNs", Form::Pem, pem_of(&tampered(request(&["a", "b"])))),
            ("two CNs", Form::Pem, pem_of(&request(&["a", "b"]))),
            ("not DER", Form::Pem, pem_of(b"\x30\x03\x02\x01")),
            ("trailing data", Form::Der, [&valid[..], &[0, 0]].concat()),
            ("not PEM", Form::Pem, b"CERTIFICATE REQUEST".to_vec()),
            ("PEM given as DER", Form::Der, pem_of(&valid)),
            ("two blocks", Form::Pem, [pem_of(&valid), pem_of(&valid)].concat()),
            ("oversize", Form::Pem, big),
        ]
    }

    #[test]
    fn a_memoised_answer_is_the_fresh_answer() {
        for (what, form, input) in cases() {
            for verify in [true, false] {
                let want = fresh(form, &input, verify, &Counters::default());
                // Every order of readers: the first read fills the memo, the others hit it.
                for first in [true, false] {
                    let memo = Memo::new(Limits::DEFAULT);
                    let before = memo.read(form, &input, first);
                    assert_eq!(before, fresh(form, &input, first, &Counters::default()), "{what}: first read");
                    assert_eq!(memo.read(form, &input, verify), want, "{what} (verify {verify}, after {first})");
                    assert_eq!(memo.read(form, &input, verify), want, "{what} (verify {verify}, again)");
                }
            }
        }
        // The cases are what they say.
        let memo = Memo::new(Limits::DEFAULT);
        let answers: Vec<_> = cases().into_iter().map(|(_, form, input)| memo.read(form, &input, true)).collect();
        assert!(answers[0].is_ok() && answers[1].is_ok() && answers[11].is_ok());
        assert!(matches!(answers[2], Err(CsrError::Signature(_))));
        assert!(matches!(answers[4], Err(CsrError::Signature(_))));
        let unverified = memo.read(Form::Pem, &cases()[4].2, false);
        assert!(matches!(unverified, Err(CsrError::Subject(_))), "{unverified:?}");
    }

    #[test]
    fn each_request_is_parsed_and_its_signature_checked_once() {
        // (case, reads as (verify) in order, parses, signature checks, hits)
        let table: [(usize, &[bool], u64, u64, u64); 6] = [
            // valid: an unverified reader, then verified ones (NodeRestriction, validation,
            // the approver, the signer).
            (0, &[false, true, false, true], 1, 1, 3),
            (1, &[true, true], 1, 1, 1),
            (2, &[true, false, true], 1, 1, 2),
            // Refused before the signature: nothing to check.
            (6, &[true, false], 1, 0, 1),
            // PEM refused: not parsed.
            (8, &[false, true], 0, 0, 1),
            // Too big to keep: every read is a fresh one, checking only what it asks.
            (11, &[false, true, true], 3, 2, 0),
        ];
        let cases = cases();
        for (case, reads, parses, signature_checks, hits) in table {
            let (what, form, input) = &cases[case];
            let memo = Memo::new(Limits::DEFAULT);
            for verify in reads {
                memo.read(*form, input, *verify).ok();
            }
            assert_eq!(memo.counters.get(), Counts { parses, signature_checks, hits }, "{what}");
        }
    }

    #[test]
    fn a_flood_of_distinct_requests_stays_within_the_bounds() {
        let valid = pem_of(&request(&["system:node:a"]));
        let want = fresh(Form::Pem, &valid, true, &Counters::default());
        for limits in [
            Limits { entries: 8, bytes: MAX_BYTES, input: MAX_INPUT },
            Limits { entries: MAX_ENTRIES, bytes: 2_000, input: MAX_INPUT },
        ] {
            let memo = Memo::new(limits);
            assert_eq!(memo.read(Form::Pem, &valid, true), want);
            for i in 0..200u32 {
                // Distinct inputs, each refused differently (a bad DER length) or alike.
                let input = [&b"\x30\x82"[..], &i.to_be_bytes(), &b"x".repeat(i as usize)].concat();
                let got = memo.read(Form::Der, &input, i % 2 == 0);
                assert_eq!(got, fresh(Form::Der, &input, i % 2 == 0, &Counters::default()), "{i}");
                let (entries, bytes) = memo.len();
                assert!(entries <= limits.entries && bytes <= limits.bytes, "{i}: {entries} entries, {bytes} bytes");
            }
            // The flood pushed the valid request out: its next reader reads it afresh, alike.
            let parses = memo.counters.get().parses;
            assert_eq!(memo.read(Form::Pem, &valid, true), want);
            assert_eq!(memo.counters.get().parses, parses + 1);
        }
        // Distinct SHA-256 keys for the two forms of one input.
        assert_ne!(key(Form::Pem, &valid), key(Form::Der, &valid));
    }
}
