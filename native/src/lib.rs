//! The journal's hot path in compiled code: link one event to its chain (the canonical bytes of
//! docs/adr/0002-hash-chain.md and their SHA-256) and Avro-encode it (docs/adr/0003-wire-format.md)
//! in one pass.  `sagacity.schemas._hotpath.link_encoded` calls it when it is installed; its output
//! is byte for byte the Python path's (tests compare them on generated entries), and anything it
//! cannot take (a field too long for the canonical form) it hands back to the Python path, which
//! raises the documented error.
//!
//! `avro.rs`: the Avro body every compiled writer writes.
//! `entry.rs`: the same for a form-1 draft, its `JournalEntry` made here too
//! (`sagacity.schemas._hotpath.link_encoded`).
//! `draft.rs`: the text rule of a draft's fields and the common draft's checks
//! (`sagacity.entries._events.EntryDraft`).
//! `verify.rs`: the archive's chain check over a binary `COPY` stream of archived rows
//! (`sagacity.chain._fastverify`; docs/adr/0013-compiled-hot-path.md).
//! `audit.rs`: the audit's merge of those verdicts with each saga's checkpoints and head
//! (`sagacity.consumers.archive._audit`).
//! `ingest.rs`: the archive's check of one journal message and the row it writes
//! (`sagacity.consumers.archive._ingest`).
//!
//! No `unsafe` code of its own: Python objects are made and read through PyO3's safe API, and
//! a `JournalEntry` through its public constructor (`entry.rs`).

#![forbid(unsafe_code)]

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

mod audit;
mod avro;
mod draft;
mod entry;
mod grammar;
mod ingest;
pub(crate) mod seal;
mod verify;

#[cfg(test)]
mod tests;

pub(crate) use avro::{avro_bytes, avro_head, avro_hex_map, avro_long};

const CANONICAL_MAGIC: &[u8] = b"SGC1";
/// Form 2 (docs/adr/0019-erasure.md §1): the data fields committed to, not hashed in clear.
const CANONICAL_MAGIC_V2: &[u8] = b"SGC2";
const COMMITMENT_MAGIC: &[u8] = b"SGK1";
pub(crate) const DATA_FIELDS: [&str; 3] = ["payload", "result", "error"];
pub(crate) const DATA_ATTRIBUTES: [&str; 3] = ["note", "redaction", "undo_arguments"];
/// `form` 1, empty `commitments`, `salts` and `sealed` maps: the Avro end of a form-1 event.
pub(crate) const FORM_1_TAIL: [u8; 4] = [2, 0, 0, 0];
const CANONICAL_NULL: [u8; 4] = [0xff; 4];
pub(crate) const HEX: &[u8; 16] = b"0123456789abcdef";

fn fits(data: &[u8]) -> bool {
    // F(bytes) needs len < 2^32 - 1 (0xFFFFFFFF is the null marker).
    data.len() < u32::MAX as usize
}

pub(crate) fn field(out: &mut Vec<u8>, data: &[u8]) {
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

pub(crate) fn unhex(text: &str) -> Option<[u8; 32]> {
    let raw = text.as_bytes();
    if raw.len() != 64 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, pair) in raw.chunks(2).enumerate() {
        out[i] = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

/// `K(name, value)` = SHA-256("SGK1" || F(name) || F(salt) || F(utf8(value))).
pub(crate) fn commitment(name: &[u8], salt: &[u8; 32], value: &[u8]) -> [u8; 32] {
    let mut preimage = Vec::with_capacity(48 + name.len() + value.len());
    preimage.extend_from_slice(COMMITMENT_MAGIC);
    field(&mut preimage, name);
    field(&mut preimage, salt);
    field(&mut preimage, value);
    Sha256::digest(&preimage).into()
}

/// A form-2 data field as hashed: its opening's commitment (equal to a stored one), the stored
/// one when the value was erased, `Ok(None)` for a null field; `Err` for an incomplete or
/// mismatched opening (the Python path says which).
fn committed(
    name: &str,
    value: Option<&[u8]>,
    commitments: &BTreeMap<String, String>,
    salts: &BTreeMap<String, String>,
) -> Result<Option<[u8; 32]>, ()> {
    let stored = match commitments.get(name) {
        None => None,
        Some(text) => Some(unhex(text).ok_or(())?),
    };
    match (value, salts.get(name)) {
        (None, Some(_)) => Err(()),
        (None, None) => Ok(stored),
        (Some(_), None) => Err(()),
        (Some(v), Some(salt)) => {
            let made = commitment(name.as_bytes(), &unhex(salt).ok_or(())?, v);
            match stored {
                Some(s) if s != made => Err(()),
                _ => Ok(Some(made)),
            }
        }
    }
}

/// A draft's attributes (a mapping sorted by key) as its items.
pub(crate) fn attribute_items<'py>(
    attributes: &Bound<'py, PyAny>,
) -> PyResult<Vec<(Bound<'py, PyString>, Bound<'py, PyString>)>> {
    let mut items = Vec::new();
    if attributes.len()? > 0 {
        for item in attributes.call_method0("items")?.try_iter()? {
            items.push(item?.extract()?);
        }
    }
    Ok(items)
}

pub(crate) fn as_pairs<'a>(
    items: &'a [(Bound<'_, PyString>, Bound<'_, PyString>)],
) -> PyResult<Vec<(&'a [u8], &'a [u8])>> {
    let mut pairs = Vec::with_capacity(items.len());
    for (k, v) in items {
        pairs.push((k.to_str()?.as_bytes(), v.to_str()?.as_bytes()));
    }
    Ok(pairs)
}

/// The text rules and the seq's range (docs/adr/0002-hash-chain.md), and every field fitting
/// the canonical form: what the Python path refuses is handed back to it, never hashed here
/// (tests/vectors/negative-v1.json).
pub(crate) fn acceptable(
    seq: i64,
    saga: &[u8],
    kind: &[u8],
    texts: &[Option<&[u8]>; 5],
    pairs: &[(&[u8], &[u8])],
) -> bool {
    let no_nul = |d: &[u8]| !d.contains(&0);
    let valid = seq >= 1
        && !saga.is_empty()
        && !kind.is_empty()
        && no_nul(saga)
        && no_nul(kind)
        && texts.iter().all(|t| t.is_none_or(no_nul))
        && pairs.iter().all(|(k, v)| no_nul(k) && no_nul(v));
    valid
        && fits(saga)
        && fits(kind)
        && texts.iter().all(|t| t.is_none_or(fits))
        && pairs.iter().all(|(k, v)| fits(k) && fits(v))
        && pairs.len() < u32::MAX as usize
}

pub(crate) fn text<'a>(value: &'a Option<Bound<'_, PyString>>) -> PyResult<Option<&'a [u8]>> {
    match value {
        None => Ok(None),
        Some(s) => Ok(Some(s.to_str()?.as_bytes())),
    }
}

/// The canonical bytes of docs/adr/0002-hash-chain.md, appended to `out`: `SGC1` (or, `form`
/// 2, `SGC2`) then each field in its order (`pairs` sorted by key, each key once).  The one
/// compiled writer of the form; the caller has checked the text rules, the seq's range and that
/// every field fits.
///
/// Form 2 (docs/adr/0019-erasure.md §1) writes `SGC2` over the same layout: the caller gives
/// the commitments (32 bytes each) of payload, result and error in `texts` and of the data
/// attributes in `pairs`; any other form is form 1 (`SGC1`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn canonical_into(
    out: &mut Vec<u8>,
    form: i64,
    saga: &[u8],
    seq: i64,
    kind: &[u8],
    texts: [Option<&[u8]>; 5],
    recorded_at_us: i64,
    pairs: &[(&[u8], &[u8])],
) {
    out.extend_from_slice(if form == 2 {
        CANONICAL_MAGIC_V2
    } else {
        CANONICAL_MAGIC
    });
    field(out, saga);
    int_field(out, seq);
    field(out, kind);
    for t in texts {
        optional_field(out, t);
    }
    int_field(out, recorded_at_us);
    out.extend_from_slice(&(pairs.len() as u32).to_be_bytes());
    for (k, v) in pairs {
        field(out, k);
        field(out, v);
    }
}

/// The entry's hash, lower-case hex: SHA-256 of `prev` (32 bytes) and its canonical bytes
/// (`canonical_into`), for the journal's `link_encode` and the archive's `archive_row`;
/// `capacity` is the hashed input's expected size.
#[allow(clippy::too_many_arguments)]
pub(crate) fn canonical_hex(
    form: i64,
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
    canonical_into(
        &mut hashed,
        form,
        saga,
        seq,
        kind,
        texts,
        recorded_at_us,
        pairs,
    );
    hex_digest(&Sha256::digest(&hashed))
}

/// A SHA-256 digest as 64 lower-case hex digits.
pub(crate) fn hex_digest(digest: &[u8]) -> [u8; 64] {
    let mut hex = [0u8; 64];
    for (i, byte) in digest.iter().take(32).enumerate() {
        hex[2 * i] = HEX[(byte >> 4) as usize];
        hex[2 * i + 1] = HEX[(byte & 0x0f) as usize];
    }
    hex
}

/// One event's fields as `link_encode` reads them: UTF-8, the attributes sorted by key.
pub(crate) struct Fields<'a> {
    pub(crate) saga: &'a [u8],
    pub(crate) seq: i64,
    pub(crate) kind: &'a [u8],
    /// tool, payload, result, error, actor.
    pub(crate) texts: [Option<&'a [u8]>; 5],
    pub(crate) recorded_at_us: i64,
    pub(crate) pairs: Vec<(&'a [u8], &'a [u8])>,
}

/// A form-2 event's data fields and data attributes as hashed, their commitments: made from
/// the `salts` given (and equal to the `commitments` given), or taken from `commitments` where
/// a value was erased.  `None` for an opening that is incomplete or does not match, or a map
/// naming a field that is not data.
#[allow(clippy::type_complexity)]
pub(crate) fn committed_fields<'a>(
    e: &Fields<'a>,
    commitments: &BTreeMap<String, String>,
    salts: &BTreeMap<String, String>,
) -> Option<([Option<[u8; 32]>; 3], Vec<(&'a [u8], Vec<u8>)>)> {
    let known =
        |k: &String| DATA_FIELDS.contains(&k.as_str()) || DATA_ATTRIBUTES.contains(&k.as_str());
    if !commitments.keys().all(known) || !salts.keys().all(known) {
        return None;
    }
    let mut data: [Option<[u8; 32]>; 3] = [None; 3];
    for (i, name) in DATA_FIELDS.iter().enumerate() {
        data[i] = committed(name, e.texts[i + 1], commitments, salts).ok()?;
    }
    let mut hashed_pairs: Vec<(&'a [u8], Vec<u8>)> = Vec::new();
    for (k, v) in &e.pairs {
        let key = std::str::from_utf8(k).ok()?;
        if DATA_ATTRIBUTES.contains(&key) {
            let c = committed(key, Some(v), commitments, salts).ok()??;
            hashed_pairs.push((k, c.to_vec()));
        } else {
            hashed_pairs.push((k, v.to_vec()));
        }
    }
    for key in DATA_ATTRIBUTES {
        let present = e.pairs.iter().any(|(k, _)| *k == key.as_bytes());
        if !present && (commitments.contains_key(key) || salts.contains_key(key)) {
            let c = committed(key, None, commitments, salts).ok()??;
            hashed_pairs.push((key.as_bytes(), c.to_vec()));
        }
    }
    hashed_pairs.sort();
    Some((data, hashed_pairs))
}

/// A form-2 event's hash (hex): the data fields and data attributes as hashed (their
/// commitments, `committed_fields`); `body` is the length of its fields.
fn committed_hex(
    prev: &[u8],
    e: &Fields<'_>,
    commitments: &BTreeMap<String, String>,
    salts: &BTreeMap<String, String>,
    body: usize,
) -> Option<[u8; 64]> {
    let texts = e.texts;
    let (data, hashed_pairs) = committed_fields(e, commitments, salts)?;
    let committed_pairs: Vec<(&[u8], &[u8])> =
        hashed_pairs.iter().map(|(k, v)| (*k, &v[..])).collect();
    let hashed_texts = [
        texts[0],
        data[0].as_ref().map(|d| &d[..]),
        data[1].as_ref().map(|d| &d[..]),
        data[2].as_ref().map(|d| &d[..]),
        texts[4],
    ];
    let capacity = 96 + body + 40 * committed_pairs.len();
    Some(canonical_hex(
        2,
        prev,
        e.saga,
        e.seq,
        e.kind,
        hashed_texts,
        e.recorded_at_us,
        &committed_pairs,
        capacity,
    ))
}

/// `link_encode`'s work on fields already read: the hash (hex) and the message value, or `None`
/// for anything the Python path must judge (a text rule broken, a field too long, a seq below
/// 1, `prev` not 32 bytes, a form other than 1 or 2, a form-1 event with commitments or salts,
/// a form-2 opening that is incomplete or does not match).
pub(crate) fn link_encode_fields(
    header: &[u8],
    prev: &[u8],
    prev_text: &[u8],
    e: &Fields<'_>,
    form: i64,
    commitments: &BTreeMap<String, String>,
    salts: &BTreeMap<String, String>,
) -> Option<([u8; 64], Vec<u8>)> {
    let (saga, seq, kind, texts, pairs) = (e.saga, e.seq, e.kind, e.texts, &e.pairs[..]);
    if !acceptable(seq, saga, kind, &texts, pairs) || prev.len() != 32 {
        return None;
    }
    let v2 = match form {
        1 if commitments.is_empty() && salts.is_empty() => false,
        2 => true,
        _ => return None,
    };
    let body: usize = saga.len()
        + kind.len()
        + texts
            .iter()
            .map(|t| t.map_or(0, |d| d.len()))
            .sum::<usize>()
        + pairs.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    let hex = if v2 {
        committed_hex(prev, e, commitments, salts, body)?
    } else {
        let capacity = 96 + body + 8 * pairs.len();
        canonical_hex(
            1,
            prev,
            saga,
            seq,
            kind,
            texts,
            e.recorded_at_us,
            pairs,
            capacity,
        )
    };
    let capacity = header.len() + 160 + body + 4 * pairs.len();
    let mut value = avro_head(
        header,
        saga,
        seq,
        kind,
        texts,
        e.recorded_at_us,
        pairs,
        prev_text,
        &hex,
        capacity,
    );
    if v2 {
        avro_long(&mut value, 2);
        avro_hex_map(&mut value, commitments);
        avro_hex_map(&mut value, salts);
        value.push(0); // nothing sealed: the Python path seals (schemas._sealed.encode_sealed)
    } else {
        value.extend_from_slice(&FORM_1_TAIL);
    }
    Some((hex, value))
}

/// Link and encode one event.
///
/// `header`: the Avro single-object marker, schema fingerprint and the `schema_version` field;
/// `prev`: the previous hash's 32 bytes and `prev_hash` its text as given; `attributes`: the
/// draft's mapping, already sorted by key.  Returns `(hash as lowercase hex, message value)`,
/// or `None` when a field does not fit the canonical form or breaks a text rule, or `seq` is
/// below 1 (the caller's Python path raises).
///
/// `form` 2 (docs/adr/0019-erasure.md §1) hashes `SGC2`: payload, result, error and the data
/// attributes as their commitments, made from the `salts` given (hex, by field name) and equal
/// to the `commitments` given, or taken from `commitments` where a value was erased; an
/// opening that is incomplete or does not match is handed back likewise.  The Avro value ends
/// with `form`, the two maps and an empty `sealed` map (schema v2).
#[pyfunction]
#[pyo3(signature = (header, prev, prev_hash, seq, saga, kind, tool, payload, result, error, actor, recorded_at_us, attributes, form=1, commitments=BTreeMap::new(), salts=BTreeMap::new()))]
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
    form: i64,
    commitments: BTreeMap<String, String>,
    salts: BTreeMap<String, String>,
) -> PyResult<Option<(Bound<'py, PyString>, Bound<'py, PyBytes>)>> {
    if seq.is_instance_of::<PyBool>() {
        return Ok(None); // an int to Python, not a seq
    }
    let items = attribute_items(&attributes)?;
    let fields = Fields {
        saga: saga.to_str()?.as_bytes(),
        seq: seq.extract()?,
        kind: kind.to_str()?.as_bytes(),
        texts: [
            text(&tool)?,
            text(&payload)?,
            text(&result)?,
            text(&error)?,
            text(&actor)?,
        ],
        recorded_at_us,
        pairs: as_pairs(&items)?,
    };
    let prev_text = prev_hash.to_str()?.as_bytes();
    let Some((hex, value)) =
        link_encode_fields(header, prev, prev_text, &fields, form, &commitments, &salts)
    else {
        return Ok(None);
    };
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

/// The module `sagacity._sagacity_native`, built into the `sagacity` distribution by setup.py.
#[pymodule]
#[pyo3(name = "_sagacity_native")]
fn sagacity_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(link_encode, m)?)?;
    m.add_function(wrap_pyfunction!(draft::valid_texts, m)?)?;
    m.add_function(wrap_pyfunction!(draft::draft_fields, m)?)?;
    m.add_function(wrap_pyfunction!(draft::draft_shapes, m)?)?;
    m.add_function(wrap_pyfunction!(entry::link_entry, m)?)?;
    m.add_function(wrap_pyfunction!(entry::seal_link_entry, m)?)?;
    m.add_function(wrap_pyfunction!(ingest::archive_row, m)?)?;
    m.add_function(wrap_pyfunction!(leaf_hash, m)?)?;
    m.add_class::<verify::CopyChainVerifier>()?;
    m.add_class::<audit::ChainAuditor>()?;
    m.add_function(wrap_pyfunction!(grammar::binding::grammar_findings, m)?)?;
    m.add("GRAMMAR_EVENT_TYPES", grammar::event_types())?;
    Ok(())
}
