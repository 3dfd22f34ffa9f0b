//! The journal's link step for a form-1 draft, entry included: `link_encode`'s (or, sealed,
//! `seal::seal_event`'s) hash and message value, and the `JournalEntry` itself, made by its
//! public constructor `JournalEntry.placed` (the caller passes it) from the draft, the link's
//! seq, previous hash and hash, and, where they differ from the draft's, the attributes with the
//! writer's merged in and a sealed writer's commitments and salts.  Nothing here writes the
//! entry's fields past its frozen `__setattr__`.  `sagacity.schemas._hotpath.link_encoded` and
//! `link_encoded_sealed` call them when installed; anything they do not take (another form, a
//! text rule broken, a field too long) they hand back as `None`, and the caller's other paths
//! judge it and raise the documented error.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyString};

use crate::seal::{opening_maps, seal_event};
use crate::{
    acceptable, as_pairs, attribute_items, avro_head, canonical_hex, text, unhex, FORM_1_TAIL,
};

type Text<'py> = Option<Bound<'py, PyString>>;
type Items<'py> = Vec<(Bound<'py, PyString>, Bound<'py, PyString>)>;

/// A form-1 draft's slots, read once, its attributes' items with the extra one merged in.
struct Draft<'py> {
    saga: Bound<'py, PyString>,
    kind: Bound<'py, PyString>,
    texts: [Text<'py>; 5],
    recorded_at_us: i64,
    items: Items<'py>,
    merged: bool,
}

impl Draft<'_> {
    /// The five texts (tool, payload, result, error, actor) as UTF-8.
    fn text_bytes(&self) -> PyResult<[Option<&[u8]>; 5]> {
        Ok([
            text(&self.texts[0])?,
            text(&self.texts[1])?,
            text(&self.texts[2])?,
            text(&self.texts[3])?,
            text(&self.texts[4])?,
        ])
    }
}

/// `draft`'s slots (`None`: not form 1).
fn read_draft<'py>(
    py: Python<'py>,
    draft: &Bound<'py, PyAny>,
    extra: Option<(Bound<'py, PyString>, Bound<'py, PyString>)>,
) -> PyResult<Option<Draft<'py>>> {
    if draft.getattr(intern!(py, "form"))?.extract::<i64>()? != 1 {
        return Ok(None);
    }
    let attributes = draft.getattr(intern!(py, "attributes"))?;
    // The draft's attributes are sorted by key (UTF-8 byte order): the extra one goes in its
    // place, or replaces the one of its key.
    let mut items = attribute_items(&attributes)?;
    let merged = extra.is_some();
    if let Some((key, value)) = extra {
        let k = key.to_str()?.as_bytes();
        let mut at = items.len();
        let mut replace = false;
        for (i, (existing, _)) in items.iter().enumerate() {
            let e = existing.to_str()?.as_bytes();
            if e >= k {
                at = i;
                replace = e == k;
                break;
            }
        }
        if replace {
            items[at] = (key, value);
        } else {
            items.insert(at, (key, value));
        }
    }
    Ok(Some(Draft {
        saga: draft.getattr(intern!(py, "saga_id"))?.extract()?,
        kind: draft.getattr(intern!(py, "event_type"))?.extract()?,
        texts: [
            draft.getattr(intern!(py, "tool"))?.extract()?,
            draft.getattr(intern!(py, "payload"))?.extract()?,
            draft.getattr(intern!(py, "result"))?.extract()?,
            draft.getattr(intern!(py, "error"))?.extract()?,
            draft.getattr(intern!(py, "actor"))?.extract()?,
        ],
        recorded_at_us: draft.getattr(intern!(py, "recorded_at_us"))?.extract()?,
        items,
        merged,
    }))
}

/// What both link functions read first: `seq` (not a bool), the previous hash's text and
/// bytes, and the draft (`None`: another path judges it).
type Opening<'a, 'py> = (i64, &'a str, [u8; 32], Draft<'py>);

fn opening<'a, 'py>(
    py: Python<'py>,
    prev_hash: &'a Bound<'py, PyString>,
    seq: &Bound<'py, PyAny>,
    draft: &Bound<'py, PyAny>,
    extra: Option<(Bound<'py, PyString>, Bound<'py, PyString>)>,
) -> PyResult<Option<Opening<'a, 'py>>> {
    if seq.is_instance_of::<PyBool>() {
        return Ok(None);
    }
    let seq_value: i64 = seq.extract()?;
    let prev_text = prev_hash.to_str()?;
    let Some(prev) = unhex(prev_text) else {
        return Ok(None);
    };
    let Some(d) = read_draft(py, draft, extra)? else {
        return Ok(None);
    };
    Ok(Some((seq_value, prev_text, prev, d)))
}

/// The `JournalEntry` of `d` at `seq` after `prev_hash`, its hash `hex`, made by `place`
/// (`JournalEntry.placed`): the attributes with the writer's merged in when `d` merged one
/// (else the draft's own), and `form_2`'s salts and commitments from a sealed writer (else the
/// draft's form 1).
fn make_entry<'py>(
    place: &Bound<'py, PyAny>,
    draft: &Bound<'py, PyAny>,
    d: &Draft<'py>,
    seq: &Bound<'py, PyAny>,
    prev_hash: &Bound<'py, PyString>,
    hex: &[u8; 64],
    form_2: Option<(Bound<'py, PyDict>, Bound<'py, PyDict>)>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = place.py();
    let attributes = if d.merged {
        let dict = PyDict::new(py);
        for (k, v) in &d.items {
            dict.set_item(k, v)?;
        }
        Some(dict)
    } else {
        None
    };
    let (salts, commitments) = match form_2 {
        Some((salts, commitments)) => (Some(salts), Some(commitments)),
        None => (None, None),
    };
    // The hex digits are ASCII, so this is valid UTF-8.
    let hash = PyString::new(py, std::str::from_utf8(hex).expect("hex is ASCII"));
    place.call1((draft, seq, prev_hash, hash, attributes, commitments, salts))
}

/// Link and encode a form-1 `draft` and make its `JournalEntry` with `place`
/// (`JournalEntry.placed`, the entry's public constructor for a link step).
///
/// `extra`: a `(key, value)` attribute added to the draft's (the writer's): merged in key
/// order, replacing one of the same key, hashed and encoded with the others and set on the
/// entry (the draft's own are otherwise).  Returns
/// `(entry, message value)`, or `None` for anything the other paths must judge: a form other
/// than 1, `prev_hash` not 64 hex digits, a seq below 1 or a bool, a text rule broken, a field
/// too long for the canonical form.
#[pyfunction]
#[pyo3(signature = (header, prev_hash, seq, draft, place, extra=None))]
pub(crate) fn link_entry<'py>(
    py: Python<'py>,
    header: &[u8],
    prev_hash: Bound<'py, PyString>,
    seq: Bound<'py, PyAny>,
    draft: Bound<'py, PyAny>,
    place: Bound<'py, PyAny>,
    extra: Option<(Bound<'py, PyString>, Bound<'py, PyString>)>,
) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyBytes>)>> {
    let Some((seq_value, prev_text, prev, d)) = opening(py, &prev_hash, &seq, &draft, extra)?
    else {
        return Ok(None);
    };
    let saga = d.saga.to_str()?.as_bytes();
    let kind = d.kind.to_str()?.as_bytes();
    let texts = d.text_bytes()?;
    let pairs = as_pairs(&d.items)?;
    if !acceptable(seq_value, saga, kind, &texts, &pairs) {
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
        1,
        &prev,
        saga,
        seq_value,
        kind,
        texts,
        d.recorded_at_us,
        &pairs,
        96 + body + 8 * pairs.len(),
    );
    let mut value = avro_head(
        header,
        saga,
        seq_value,
        kind,
        texts,
        d.recorded_at_us,
        &pairs,
        prev_text.as_bytes(),
        &hex,
        header.len() + 160 + body + 4 * pairs.len(),
    );
    value.extend_from_slice(&FORM_1_TAIL);
    let entry = make_entry(&place, &draft, &d, &seq, &prev_hash, &hex, None)?;
    Ok(Some((entry, PyBytes::new(py, &value))))
}

/// `link_entry` sealed: a form-1 `draft` committed to, linked in form 2 and encoded with its
/// openings sealed under the saga's 32-byte data key `key` (`seal::seal_event`: each data
/// field present gets a salt and a nonce from the system's generator, drawn in one call), its
/// `JournalEntry` (form 2, with the salts and commitments drawn) made by `place` too; `extra`
/// as in `link_entry`.  Returns
/// `(entry, message value)`, or `None` for anything the other paths must judge (as
/// `link_entry`, or a key not 32 bytes).  The system's generator failing is an `OSError`.
#[pyfunction]
#[pyo3(signature = (header, prev_hash, seq, draft, place, key, extra=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn seal_link_entry<'py>(
    py: Python<'py>,
    header: &[u8],
    prev_hash: Bound<'py, PyString>,
    seq: Bound<'py, PyAny>,
    draft: Bound<'py, PyAny>,
    place: Bound<'py, PyAny>,
    key: &[u8],
    extra: Option<(Bound<'py, PyString>, Bound<'py, PyString>)>,
) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyBytes>)>> {
    let Some((seq_value, prev_text, prev, d)) = opening(py, &prev_hash, &seq, &draft, extra)?
    else {
        return Ok(None);
    };
    let texts = d.text_bytes()?;
    let pairs = as_pairs(&d.items)?;
    let Some(event) = seal_event(
        header,
        &prev,
        prev_text.as_bytes(),
        seq_value,
        d.saga.to_str()?.as_bytes(),
        d.kind.to_str()?.as_bytes(),
        texts,
        d.recorded_at_us,
        &pairs,
        key,
    )?
    else {
        return Ok(None);
    };
    let maps = opening_maps(py, &event.by_name)?;
    let entry = make_entry(
        &place,
        &draft,
        &d,
        &seq,
        &prev_hash,
        &event.digest,
        Some(maps),
    )?;
    Ok(Some((entry, PyBytes::new(py, &event.value))))
}
