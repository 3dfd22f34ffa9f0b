//! The Avro body of a journal event as every compiled writer writes it
//! (docs/adr/0003-wire-format.md): `long` (zig-zag, base-128), `bytes`, the nullable texts, the head of the value up to its
//! hash, and the form-2 maps of hex text.

use std::collections::BTreeMap;

/// Avro `long`: zig-zag, then little-endian base-128 groups.
pub(crate) fn avro_long(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag > 0x7f {
        out.push(((zigzag & 0x7f) | 0x80) as u8);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

pub(crate) fn avro_bytes(out: &mut Vec<u8>, data: &[u8]) {
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

/// An event's Avro value up to its hash, the part every writer writes alike: `header`, then
/// saga, seq, kind, the five texts (`None`: null, as a sealed writer writes its data fields),
/// the time, the attributes (`pairs`, sorted), the previous hash's text and `hash`.  The caller
/// appends the form's tail; `capacity` is the value's expected size.
#[allow(clippy::too_many_arguments)]
pub(crate) fn avro_head(
    header: &[u8],
    saga: &[u8],
    seq: i64,
    kind: &[u8],
    texts: [Option<&[u8]>; 5],
    recorded_at_us: i64,
    pairs: &[(&[u8], &[u8])],
    prev_text: &[u8],
    hash: &[u8],
    capacity: usize,
) -> Vec<u8> {
    let mut value = Vec::with_capacity(capacity);
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
        for (k, v) in pairs {
            avro_bytes(&mut value, k);
            avro_bytes(&mut value, v);
        }
    }
    value.push(0);
    avro_bytes(&mut value, prev_text);
    avro_bytes(&mut value, hash);
    value
}

pub(crate) fn avro_hex_map(out: &mut Vec<u8>, map: &BTreeMap<String, String>) {
    if !map.is_empty() {
        avro_long(out, map.len() as i64);
        for (k, v) in map {
            avro_bytes(out, k.as_bytes());
            avro_bytes(out, v.as_bytes());
        }
    }
    out.push(0);
}
