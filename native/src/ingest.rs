//! The archive's ingest check in compiled code: decode one journal message (Avro of the current
//! schema, docs/adr/0003-wire-format.md), check it is a valid entry keyed by its saga, in the
//! archive's time range, hashing to its own hash (docs/adr/0002-hash-chain.md), and build the
//! row the archiver writes.
//!
//! `sagacity.consumers.archive._ingest` calls it before its Python paths when it is installed.
//! It accepts only what those paths accept, with the same row; anything else (another schema,
//! a field that is not valid, a hash that does not match, an odd encoding) it hands back as
//! `None`, and the Python paths decide and explain.  Of schema v2 it takes form-1 events only:
//! a form-2 event (commitments, salts) or a sealed one (docs/adr/0019-erasure.md) is handed
//! back, since opening sealed data needs the key service, which only the Python path has.

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::{canonical_hex, FORM_1_TAIL};

/// Event times a monthly partition can hold: 1970-01-01 up to (not including) year 10000.
const MAX_US: i64 = 253_402_300_800_000_000;

struct Avro<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Avro<'a> {
    /// A zig-zag `long`; `None` past the end, or for 10-byte encodings (|value| >= 2^62),
    /// which the Python path judges.
    fn long(&mut self) -> Option<i64> {
        let mut value: u64 = 0;
        for shift in (0..63).step_by(7) {
            let byte = *self.data.get(self.at)?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        None
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.long()?).ok()?;
        let end = self.at.checked_add(len)?;
        let out = self.data.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    /// A string: valid UTF-8 holding no U+0000 (the entry's text rule).
    fn text(&mut self) -> Option<&'a str> {
        let data = self.bytes()?;
        if data.contains(&0) || data.len() >= u32::MAX as usize {
            return None;
        }
        std::str::from_utf8(data).ok()
    }

    /// A `["null", "string"]` union.
    fn optional(&mut self) -> Option<Option<&'a str>> {
        match self.long()? {
            0 => Some(None),
            1 => Some(Some(self.text()?)),
            _ => None,
        }
    }

    /// A `{"type": "map", "values": "string"}`, in the order written.
    fn map(&mut self) -> Option<Vec<(&'a str, &'a str)>> {
        let mut pairs = Vec::new();
        loop {
            let count = self.long()?;
            if count == 0 {
                return Some(pairs);
            }
            let count = if count < 0 {
                self.long()?; // the block's size in bytes
                count.checked_neg()?
            } else {
                count
            };
            for _ in 0..count {
                let key = self.text()?;
                let value = self.text()?;
                pairs.push((key, value));
            }
        }
    }
}

/// `json.dumps(text, ensure_ascii=False)`.
fn json_text(out: &mut String, text: &str) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn lower_hex_digest(text: &str) -> Option<[u8; 32]> {
    let text = text.as_bytes();
    if text.len() != 64 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = (digit(text[2 * i])? << 4) | digit(text[2 * i + 1])?;
    }
    Some(out)
}

struct Event<'a> {
    saga: &'a str,
    seq: i64,
    kind: &'a str,
    texts: [Option<&'a str>; 5],
    recorded_at_us: i64,
    attributes: Vec<(&'a str, &'a str)>,
    prev_hash: &'a str,
    hash: &'a str,
}

fn decode<'a>(prefix: &[u8], key: Option<&[u8]>, value: &'a [u8]) -> Option<Event<'a>> {
    if !value.starts_with(prefix) {
        return None;
    }
    let mut avro = Avro {
        data: value,
        at: prefix.len(),
    };
    i32::try_from(avro.long()?).ok()?; // schema_version, an Avro int
    let saga = avro.text()?;
    let seq = avro.long()?;
    let kind = avro.text()?;
    let texts = [
        avro.optional()?,
        avro.optional()?,
        avro.optional()?,
        avro.optional()?,
        avro.optional()?,
    ];
    let recorded_at_us = avro.long()?;
    let attributes = avro.map()?;
    let prev_hash = avro.text()?;
    let hash = avro.text()?;
    // Form 1: `form` 1, no commitments, no salts, nothing sealed (anything else: Python's).
    let valid = value.get(avro.at..) == Some(&FORM_1_TAIL[..])
        && !saga.is_empty()
        && seq >= 1
        && !kind.is_empty()
        && (0..MAX_US).contains(&recorded_at_us)
        && key == Some(saga.as_bytes());
    valid.then_some(Event {
        saga,
        seq,
        kind,
        texts,
        recorded_at_us,
        attributes,
        prev_hash,
        hash,
    })
}

/// The attributes as a JSON object's text, in the order the message holds them.
fn attributes_json(attributes: &[(&str, &str)]) -> String {
    if attributes.is_empty() {
        return String::from("{}");
    }
    let mut out = String::with_capacity(2 + 8 * attributes.len());
    out.push('{');
    for (i, (k, v)) in attributes.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        json_text(&mut out, k);
        out.push_str(": ");
        json_text(&mut out, v);
    }
    out.push('}');
    out
}

/// Check one journal message for the archive.
///
/// `prefix`: the single-object marker and the current schema's fingerprint (a message of
/// another schema is the Python path's).  Returns the row the archiver writes (`saga_id, seq,
/// event_type, tool, payload, result, error, actor, attributes as JSON text, recorded_at_us,
/// hash, prev_hash, topic, partition, offset, form, commitments, salts` — the last three
/// always `1, "{}", "{}"`), or `None`: the Python paths decide (every form-2 or sealed event).
#[pyfunction]
#[pyo3(signature = (prefix, key, value, topic, partition, offset))]
pub fn archive_row<'py>(
    py: Python<'py>,
    prefix: &[u8],
    key: Option<&[u8]>,
    value: &[u8],
    topic: Bound<'py, PyAny>,
    partition: Bound<'py, PyAny>,
    offset: Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let Some(event) = decode(prefix, key, value) else {
        return Ok(None);
    };
    let Some(prev) = lower_hex_digest(event.prev_hash) else {
        return Ok(None);
    };
    let mut sorted: Vec<(&[u8], &[u8])> = event
        .attributes
        .iter()
        .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
        .collect();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0].0 == w[1].0) {
        return Ok(None); // a key written twice: the Python path's to read
    }
    let hex = canonical_hex(
        1,
        &prev,
        event.saga.as_bytes(),
        event.seq,
        event.kind.as_bytes(),
        event.texts.map(|t| t.map(str::as_bytes)),
        event.recorded_at_us,
        &sorted,
        160 + value.len(),
    );
    if hex != event.hash.as_bytes() {
        return Ok(None);
    }
    let attributes = attributes_json(&event.attributes);
    let text = |t: Option<&str>| -> Bound<'py, PyAny> {
        match t {
            None => py.None().into_bound(py),
            Some(s) => PyString::new(py, s).into_any(),
        }
    };
    let row: Vec<Bound<'py, PyAny>> = vec![
        PyString::new(py, event.saga).into_any(),
        event.seq.into_pyobject(py)?.into_any(),
        PyString::new(py, event.kind).into_any(),
        text(event.texts[0]),
        text(event.texts[1]),
        text(event.texts[2]),
        text(event.texts[3]),
        text(event.texts[4]),
        PyString::new(py, &attributes).into_any(),
        event.recorded_at_us.into_pyobject(py)?.into_any(),
        PyString::new(py, event.hash).into_any(),
        PyString::new(py, event.prev_hash).into_any(),
        topic,
        partition,
        offset,
        1i64.into_pyobject(py)?.into_any(),
        PyString::new(py, "{}").into_any(),
        PyString::new(py, "{}").into_any(),
    ];
    Ok(Some(PyTuple::new(py, row)?))
}
