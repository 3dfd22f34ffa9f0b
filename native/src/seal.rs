//! The sealed journal's hot path: link one event in chain form 2 and Avro-encode it with its
//! data fields' openings sealed under the saga's data key, in one pass
//! (docs/adr/0019-erasure.md §1 and §3).  `sagacity.schemas._hotpath.link_encoded_sealed` calls
//! it when it is installed; what it writes is what `committing`, `link` and `encode_sealed`
//! write for the same salts and nonces (tests open it with the key service and compare), and
//! anything it cannot take it hands back to that Python path, which raises the documented error.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{
    acceptable, avro_bytes, avro_head, avro_long, canonical_hex, commitment, field,
    DATA_ATTRIBUTES, DATA_FIELDS, HEX,
};

/// A sealed field's magic (`sagacity.privacy._envelope.SEALED_MAGIC`), also the start of its
/// associated data.
const SEALED_MAGIC: &[u8] = b"SGE1";
const SALT_BYTES: usize = 32;
const NONCE_BYTES: usize = 12;
/// Random bytes one data field takes from `random`: its salt, then its nonce.
const DRAW: usize = SALT_BYTES + NONCE_BYTES;

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 * bytes.len());
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 0x0f) as usize] as char);
    }
    out
}

/// `"SGE1" || nonce || AES-256-GCM(opening)`, the associated data binding it to its place:
/// `"SGE1" || F(saga_id) || F(int64_be(seq)) || F(field)` (`sagacity.privacy._envelope.seal_ad`).
fn seal_field(
    cipher: &Aes256Gcm,
    nonce: &[u8],
    saga: &[u8],
    seq: i64,
    name: &[u8],
    opening: &[u8],
) -> Option<Vec<u8>> {
    let mut ad = Vec::with_capacity(28 + saga.len() + name.len());
    ad.extend_from_slice(SEALED_MAGIC);
    field(&mut ad, saga);
    field(&mut ad, &seq.to_be_bytes());
    field(&mut ad, name);
    let body = cipher
        .encrypt(
            Nonce::from_slice(nonce),
            Payload {
                msg: opening,
                aad: &ad,
            },
        )
        .ok()?;
    let mut out = Vec::with_capacity(SEALED_MAGIC.len() + NONCE_BYTES + body.len());
    out.extend_from_slice(SEALED_MAGIC);
    out.extend_from_slice(nonce);
    out.extend_from_slice(&body);
    Some(out)
}

/// One data field, committed to and sealed.
pub(crate) struct Opened<'a> {
    name: &'a [u8],
    salt: [u8; SALT_BYTES],
    commitment: [u8; 32],
    sealed: Vec<u8>,
}

/// `value` of data field `name` with the salt and nonce of `draw` (`None`: too few random
/// bytes were given).
fn commit<'a>(
    cipher: &Aes256Gcm,
    draw: Option<&[u8]>,
    saga: &[u8],
    seq: i64,
    name: &'a [u8],
    value: &[u8],
) -> Option<Opened<'a>> {
    let (salt, nonce) = draw?.split_at(SALT_BYTES);
    let salt: [u8; SALT_BYTES] = salt.try_into().ok()?;
    let mut opening = Vec::with_capacity(SALT_BYTES + value.len());
    opening.extend_from_slice(&salt);
    opening.extend_from_slice(value);
    Some(Opened {
        name,
        salt,
        commitment: commitment(name, &salt, value),
        sealed: seal_field(cipher, nonce, saga, seq, name, &opening)?,
    })
}

/// A form-1 event linked in form 2, its data fields committed to and sealed: the hash, the
/// message value and the openings (sorted by name).
pub(crate) struct SealedEvent<'a> {
    pub(crate) digest: [u8; 64],
    pub(crate) value: Vec<u8>,
    pub(crate) by_name: Vec<Opened<'a>>,
}

/// The event's data fields and data attributes, each committed to and sealed, and its
/// attributes as the form hashes them and as they travel.
struct Committed<'a> {
    /// The openings: the data fields' in `DATA_FIELDS` order, then the data attributes'.
    opened: Vec<Opened<'a>>,
    /// Each data field's commitment, in `DATA_FIELDS` order.
    data: [Option<[u8; 32]>; 3],
    /// The attributes hashed, sorted by key (a data attribute as its commitment).
    hashed: Vec<(&'a [u8], Vec<u8>)>,
    /// The attributes that travel in clear.
    clear: Vec<(&'a [u8], &'a [u8])>,
}

/// Commit to and seal each data field and data attribute of an event (`None`: the Python path
/// must judge it).
fn commit_all<'a>(
    cipher: &Aes256Gcm,
    saga: &[u8],
    seq: i64,
    texts: &[Option<&[u8]>; 5],
    pairs: &[(&'a [u8], &'a [u8])],
) -> PyResult<Option<Committed<'a>>> {
    // Each data field present, in order: a salt and nonce drawn, its commitment made, its
    // opening (salt, then value) sealed.
    let fields = DATA_FIELDS
        .iter()
        .enumerate()
        .filter(|(i, _)| texts[i + 1].is_some())
        .count()
        + pairs
            .iter()
            .filter(|(k, _)| DATA_ATTRIBUTES.iter().any(|d| d.as_bytes() == *k))
            .count();
    let mut random = vec![0u8; DRAW * fields];
    getrandom::fill(&mut random).map_err(|e| {
        pyo3::exceptions::PyOSError::new_err(format!("the system's generator: {e}"))
    })?;
    let mut draws = random.chunks_exact(DRAW);
    let mut opened: Vec<Opened> = Vec::new();
    let mut data: [Option<[u8; 32]>; 3] = [None; 3];
    for (i, name) in DATA_FIELDS.iter().enumerate() {
        if let Some(value) = texts[i + 1] {
            let Some(one) = commit(cipher, draws.next(), saga, seq, name.as_bytes(), value) else {
                return Ok(None);
            };
            data[i] = Some(one.commitment);
            opened.push(one);
        }
    }
    // The attributes are sorted by key, so the hashed pairs (a data attribute as its
    // commitment) are too; the clear ones travel in `attributes`, the data ones sealed.
    let mut hashed: Vec<(&[u8], Vec<u8>)> = Vec::with_capacity(pairs.len());
    let mut clear: Vec<(&[u8], &[u8])> = Vec::with_capacity(pairs.len());
    for &(k, v) in pairs {
        if DATA_ATTRIBUTES.iter().any(|d| d.as_bytes() == k) {
            let Some(one) = commit(cipher, draws.next(), saga, seq, k, v) else {
                return Ok(None);
            };
            hashed.push((k, one.commitment.to_vec()));
            opened.push(one);
        } else {
            hashed.push((k, v.to_vec()));
            clear.push((k, v));
        }
    }
    Ok(Some(Committed {
        opened,
        data,
        hashed,
        clear,
    }))
}

/// The message value's tail after its head: form 2, the commitments, the salts (none) and the
/// sealed openings.
fn write_openings(value: &mut Vec<u8>, opened: &[Opened]) {
    avro_long(value, 2);
    // The commitments, sorted by name as the Python writer sorts them.
    let mut by_name: Vec<&Opened> = opened.iter().collect();
    by_name.sort_by(|a, b| a.name.cmp(b.name));
    if !by_name.is_empty() {
        avro_long(value, by_name.len() as i64);
        for one in &by_name {
            avro_bytes(value, one.name);
            avro_bytes(value, hex(&one.commitment).as_bytes());
        }
    }
    value.push(0);
    value.push(0); // no salts: they travel inside the sealed openings
    if !opened.is_empty() {
        avro_long(value, opened.len() as i64);
        for one in opened {
            avro_bytes(value, one.name);
            avro_bytes(value, &one.sealed);
        }
    }
    value.push(0);
}

/// The work of `entry::seal_link_entry` on fields already read (`pairs` sorted by key): `None` for
/// anything the Python path must judge.
#[allow(clippy::too_many_arguments)]
pub(crate) fn seal_event<'a>(
    header: &[u8],
    prev: &[u8],
    prev_text: &[u8],
    seq: i64,
    saga: &[u8],
    kind: &[u8],
    texts: [Option<&[u8]>; 5],
    recorded_at_us: i64,
    pairs: &[(&'a [u8], &'a [u8])],
    key: &[u8],
) -> PyResult<Option<SealedEvent<'a>>> {
    if !acceptable(seq, saga, kind, &texts, pairs) || prev.len() != 32 {
        return Ok(None);
    }
    let Ok(cipher) = Aes256Gcm::new_from_slice(key) else {
        return Ok(None);
    };

    let Some(Committed {
        mut opened,
        data,
        hashed,
        clear,
    }) = commit_all(&cipher, saga, seq, &texts, pairs)?
    else {
        return Ok(None);
    };

    let body: usize = saga.len()
        + kind.len()
        + texts[0].map_or(0, |d| d.len())
        + texts[4].map_or(0, |d| d.len())
        + hashed.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    let hashed_pairs: Vec<(&[u8], &[u8])> = hashed.iter().map(|(k, v)| (*k, &v[..])).collect();
    let digest = canonical_hex(
        2,
        prev,
        saga,
        seq,
        kind,
        [
            texts[0],
            data[0].as_ref().map(|d| &d[..]),
            data[1].as_ref().map(|d| &d[..]),
            data[2].as_ref().map(|d| &d[..]),
            texts[4],
        ],
        recorded_at_us,
        &hashed_pairs,
        96 + body + 40 * hashed_pairs.len() + 100,
    );

    let sealed_size: usize = opened
        .iter()
        .map(|o| o.name.len() + o.sealed.len() + 80)
        .sum();
    let mut value = avro_head(
        header,
        saga,
        seq,
        kind,
        // Payload, result and error travel sealed: null here.
        [texts[0], None, None, None, texts[4]],
        recorded_at_us,
        &clear,
        prev_text,
        &digest,
        header.len() + 400 + body + sealed_size,
    );
    write_openings(&mut value, &opened);

    opened.sort_by(|a, b| a.name.cmp(b.name));
    Ok(Some(SealedEvent {
        digest,
        value,
        by_name: opened,
    }))
}

/// The salts and commitments of `by_name` as dicts (hex by field name, in name order).
pub(crate) fn opening_maps<'py>(
    py: Python<'py>,
    by_name: &[Opened<'_>],
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let salts = PyDict::new(py);
    let commitments = PyDict::new(py);
    for one in by_name {
        let name = std::str::from_utf8(one.name).expect("a Python str is UTF-8");
        salts.set_item(name, hex(&one.salt))?;
        commitments.set_item(name, hex(&one.commitment))?;
    }
    Ok((salts, commitments))
}
