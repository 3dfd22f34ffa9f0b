//! The journal's hot path in compiled code: link one event to its chain (the canonical bytes of
//! docs/adr/0002-hash-chain.md and their SHA-256) and Avro-encode it (docs/adr/0003-wire-format.md)
//! in one pass.  `sagacity.schemas._codec.link_encoded` calls it when it is installed; its output
//! is byte for byte the Python path's (tests compare them on generated entries), and anything it
//! cannot take (a field too long for the canonical form) it hands back to the Python path, which
//! raises the documented error.
//!
//! `verify.rs`: the archive's chain check over a binary `COPY` stream of archived rows
//! (`sagacity.consumers.archive._fastverify`; docs/adr/0013-compiled-hot-path.md).
//! `audit.rs`: the audit's merge of those verdicts with each saga's checkpoints and head
//! (`sagacity.consumers.archive._audit`).
//! `ingest.rs`: the archive's check of one journal message and the row it writes
//! (`sagacity.consumers.archive._ingest`).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};
use sha2::{Digest, Sha256};

mod audit;
mod ingest;
mod verify;

const CANONICAL_MAGIC: &[u8] = b"SGC1";
const CANONICAL_NULL: [u8; 4] = [0xff; 4];
const HEX: &[u8; 16] = b"0123456789abcdef";

fn fits(data: &[u8]) -> bool {
    // F(bytes) needs len < 2^32 - 1 (0xFFFFFFFF is the null marker).
    data.len() < u32::MAX as usize
}

fn field(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

fn optional_field(out: &mut Vec<u8>, data: Option<&[u8]>) {
    match data {
        None => out.extend_from_slice(&CANONICAL_NULL),
        Some(d) => field(out, d),
    }
}

fn int_field(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(&8u32.to_be_bytes());
    out.extend_from_slice(&value.to_be_bytes());
}

/// Avro `long`: zig-zag, then little-endian base-128 groups.
fn avro_long(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag > 0x7f {
        out.push(((zigzag & 0x7f) | 0x80) as u8);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

fn avro_bytes(out: &mut Vec<u8>, data: &[u8]) {
    avro_long(out, data.len() as i64);
    out.extend_from_slice(data);
}

fn avro_optional(out: &mut Vec<u8>, data: Option<&[u8]>) {
    match data {
        None => out.push(0),
        Some(d) => {
            out.push(2);
            avro_bytes(out, d);
        }
    }
}

fn text<'a>(value: &'a Option<Bound<'_, PyString>>) -> PyResult<Option<&'a [u8]>> {
    match value {
        None => Ok(None),
        Some(s) => Ok(Some(s.to_str()?.as_bytes())),
    }
}

/// The entry's hash, lower-case hex: SHA-256 of `prev` (32 bytes) and the canonical bytes of
/// docs/adr/0002-hash-chain.md (`pairs` sorted by key, each key once).  The one compiled writer
/// of the form, for the journal's `link_encode` and the archive's `archive_row`; the caller has
/// checked the text rules, the seq's range and that every field fits.
#[allow(clippy::too_many_arguments)]
pub(crate) fn canonical_hex(
    prev: &[u8],
    saga: &[u8],
    seq: i64,
    kind: &[u8],
    texts: [Option<&[u8]>; 5],
    recorded_at_us: i64,
    pairs: &[(&[u8], &[u8])],
    capacity: usize,
) -> [u8; 64] {
    let mut hashed = Vec::with_capacity(capacity);
    hashed.extend_from_slice(prev);
    hashed.extend_from_slice(CANONICAL_MAGIC);
    field(&mut hashed, saga);
    int_field(&mut hashed, seq);
    field(&mut hashed, kind);
    for t in texts {
        optional_field(&mut hashed, t);
    }
    int_field(&mut hashed, recorded_at_us);
    hashed.extend_from_slice(&(pairs.len() as u32).to_be_bytes());
    for (k, v) in pairs {
        field(&mut hashed, k);
        field(&mut hashed, v);
    }
    let digest = Sha256::digest(&hashed);
    let mut hex = [0u8; 64];
    for (i, byte) in digest.iter().enumerate() {
        hex[2 * i] = HEX[(byte >> 4) as usize];
        hex[2 * i + 1] = HEX[(byte & 0x0f) as usize];
    }
    hex
}

/// Link and encode one event.
///
/// `header`: the Avro single-object marker, schema fingerprint and the `schema_version` field;
/// `prev`: the previous hash's 32 bytes and `prev_hash` its text as given; `attributes`: the
/// draft's mapping, already sorted by key.  Returns `(hash as lowercase hex, message value)`,
/// or `None` when a field does not fit the canonical form or breaks a text rule, or `seq` is
/// below 1 (the caller's Python path raises).
#[pyfunction]
#[pyo3(signature = (header, prev, prev_hash, seq, saga, kind, tool, payload, result, error, actor, recorded_at_us, attributes))]
#[allow(clippy::too_many_arguments)]
fn link_encode<'py>(
    py: Python<'py>,
    header: &[u8],
    prev: &[u8],
    prev_hash: Bound<'py, PyString>,
    seq: Bound<'py, PyAny>,
    saga: Bound<'py, PyString>,
    kind: Bound<'py, PyString>,
    tool: Option<Bound<'py, PyString>>,
    payload: Option<Bound<'py, PyString>>,
    result: Option<Bound<'py, PyString>>,
    error: Option<Bound<'py, PyString>>,
    actor: Option<Bound<'py, PyString>>,
    recorded_at_us: i64,
    attributes: Bound<'py, PyAny>,
) -> PyResult<Option<(Bound<'py, PyString>, Bound<'py, PyBytes>)>> {
    if seq.is_instance_of::<PyBool>() {
        return Ok(None); // an int to Python, not a seq
    }
    let seq: i64 = seq.extract()?;
    let saga = saga.to_str()?.as_bytes();
    let kind = kind.to_str()?.as_bytes();
    let texts = [
        text(&tool)?,
        text(&payload)?,
        text(&result)?,
        text(&error)?,
        text(&actor)?,
    ];
    let mut items: Vec<(Bound<'py, PyString>, Bound<'py, PyString>)> = Vec::new();
    if attributes.len()? > 0 {
        for item in attributes.call_method0("items")?.try_iter()? {
            items.push(item?.extract()?);
        }
    }
    let mut pairs: Vec<(&[u8], &[u8])> = Vec::with_capacity(items.len());
    for (k, v) in &items {
        pairs.push((k.to_str()?.as_bytes(), v.to_str()?.as_bytes()));
    }
    // The text rules and the seq's range (docs/adr/0002-hash-chain.md): what the Python path
    // refuses is handed back to it, never hashed here (tests/vectors/negative-v1.json).
    let no_nul = |d: &[u8]| !d.contains(&0);
    let valid = seq >= 1
        && !saga.is_empty()
        && !kind.is_empty()
        && no_nul(saga)
        && no_nul(kind)
        && texts.iter().all(|t| t.is_none_or(no_nul))
        && pairs.iter().all(|(k, v)| no_nul(k) && no_nul(v));
    let all_fit = valid
        && fits(saga)
        && fits(kind)
        && texts.iter().all(|t| t.is_none_or(fits))
        && pairs.iter().all(|(k, v)| fits(k) && fits(v))
        && pairs.len() < u32::MAX as usize;
    if !all_fit || prev.len() != 32 {
        return Ok(None);
    }

    let body: usize = saga.len()
        + kind.len()
        + texts
            .iter()
            .map(|t| t.map_or(0, |d| d.len()))
            .sum::<usize>()
        + pairs.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    let hex = canonical_hex(
        prev,
        saga,
        seq,
        kind,
        texts,
        recorded_at_us,
        &pairs,
        96 + body + 8 * pairs.len(),
    );

    let prev_text = prev_hash.to_str()?.as_bytes();
    let mut value = Vec::with_capacity(header.len() + 160 + body + 4 * pairs.len());
    value.extend_from_slice(header);
    avro_bytes(&mut value, saga);
    avro_long(&mut value, seq);
    avro_bytes(&mut value, kind);
    for t in texts {
        avro_optional(&mut value, t);
    }
    avro_long(&mut value, recorded_at_us);
    if !pairs.is_empty() {
        avro_long(&mut value, pairs.len() as i64);
        for (k, v) in &pairs {
            avro_bytes(&mut value, k);
            avro_bytes(&mut value, v);
        }
    }
    value.push(0);
    avro_bytes(&mut value, prev_text);
    avro_bytes(&mut value, &hex);

    // The hex digits are ASCII, so this is valid UTF-8.
    let hash = PyString::new(py, std::str::from_utf8(&hex).expect("hex is ASCII"));
    Ok(Some((hash, PyBytes::new(py, &value))))
}

/// The Merkle leaf of one signed head, as `sagacity.consumers.archive._checkpoints.leaf_hash`
/// computes it: `SHA-256(0x00 || "SGCL1" || F(saga_id) || F(int64_be(seq)) || F(hash))`
/// (docs/adr/0012-checkpoint-rounds.md).  `None` for anything that function must judge
/// (a value of another type, text it cannot encode, a seq beyond 64 bits): it raises, and
/// the audit quotes its message.
#[pyfunction]
fn leaf_hash<'py>(
    py: Python<'py>,
    saga_id: &Bound<'py, PyAny>,
    seq: &Bound<'py, PyAny>,
    hash: &Bound<'py, PyAny>,
) -> Option<Bound<'py, PyBytes>> {
    let saga = saga_id.downcast::<PyString>().ok()?.to_str().ok()?;
    let seq: i64 = seq.downcast::<PyInt>().ok()?.extract().ok()?;
    let hash = hash.downcast::<PyString>().ok()?.to_str().ok()?;
    if !hash.is_ascii() || !fits(saga.as_bytes()) || !fits(hash.as_bytes()) {
        return None;
    }
    let mut out = Vec::with_capacity(1 + 5 + 4 + saga.len() + 12 + 4 + hash.len());
    out.push(0u8);
    out.extend_from_slice(b"SGCL1");
    field(&mut out, saga.as_bytes());
    field(&mut out, &seq.to_be_bytes());
    field(&mut out, hash.as_bytes());
    Some(PyBytes::new(py, &Sha256::digest(&out)))
}

#[pymodule]
fn sagacity_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(link_encode, m)?)?;
    m.add_function(wrap_pyfunction!(ingest::archive_row, m)?)?;
    m.add_function(wrap_pyfunction!(leaf_hash, m)?)?;
    m.add_class::<verify::CopyChainVerifier>()?;
    m.add_class::<audit::ChainAuditor>()?;
    Ok(())
}
