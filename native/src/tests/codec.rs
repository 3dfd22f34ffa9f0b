//! The compiled writer (`link_encode`'s core, `crate::link_encode_fields`) over the vectors:
//! every entry of `chain-v1.json` and `chain-v2.json` gets the vectors' canonical bytes and hash,
//! and every entry of `negative-v1.json` and `negative-v2.json` is handed back (to the Python
//! path, which raises the documented error) or never reaches it.

use std::collections::BTreeMap;

use super::json::{vectors, Json};
use crate::{
    avro_bytes, avro_hex_map, avro_long, canonical_into, committed_fields, link_encode_fields,
    unhex, Fields, FORM_1_TAIL,
};

const HEADER: &[u8] = b"\xc3\x01fingerp\x04";

fn hex_bytes(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// An entry as the compiled writer's binding takes it, or `None` where the binding itself
/// refuses it (not text, not a 64-bit integer, a boolean seq, a lone surrogate): such a value
/// never reaches the writer, and the caller's Python path raises the documented error.
struct Taken<'a> {
    fields: Fields<'a>,
    prev_hash: &'a str,
    form: i64,
    commitments: BTreeMap<String, String>,
    salts: BTreeMap<String, String>,
}

fn text(value: &Json) -> Option<Option<&[u8]>> {
    match value {
        Json::Null => Some(None),
        Json::Str(s) => Some(Some(s.as_bytes())),
        _ => None,
    }
}

fn hex_map(value: &Json) -> Option<BTreeMap<String, String>> {
    match value {
        Json::Null => Some(BTreeMap::new()),
        Json::Object(members) => members
            .iter()
            .map(|(k, v)| match v {
                Json::Str(s) => Some((k.clone(), s.clone())),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn taken(e: &Json) -> Option<Taken<'_>> {
    let pairs = match e.get("attributes") {
        Json::Null => Vec::new(),
        Json::Object(members) => {
            let mut pairs = Vec::new();
            for (k, v) in members {
                pairs.push((k.as_bytes(), text(v)??));
            }
            // A draft's attributes are sorted by key (UTF-8 byte order) before the writer
            // sees them.
            pairs.sort();
            pairs
        }
        _ => return None,
    };
    let Json::Str(prev_hash) = e.get("prev_hash") else {
        return None;
    };
    let form = match e.get("form") {
        Json::Null => 1,
        other => other.i64()?,
    };
    Some(Taken {
        fields: Fields {
            saga: text(e.get("saga_id"))??,
            seq: e.get("seq").i64()?,
            kind: text(e.get("event_type"))??,
            texts: [
                text(e.get("tool"))?,
                text(e.get("payload"))?,
                text(e.get("result"))?,
                text(e.get("error"))?,
                text(e.get("actor"))?,
            ],
            recorded_at_us: e.get("recorded_at_us").i64()?,
            pairs,
        },
        prev_hash,
        form,
        commitments: hex_map(e.get("commitments"))?,
        salts: hex_map(e.get("salts"))?,
    })
}

/// The canonical bytes of a taken entry, its data committed to in form 2.
fn canonical(t: &Taken<'_>) -> Vec<u8> {
    let f = &t.fields;
    let mut out = Vec::new();
    if t.form != 2 {
        canonical_into(
            &mut out,
            1,
            f.saga,
            f.seq,
            f.kind,
            f.texts,
            f.recorded_at_us,
            &f.pairs,
        );
        return out;
    }
    let (data, hashed) = committed_fields(f, &t.commitments, &t.salts).expect("an entry");
    let pairs: Vec<(&[u8], &[u8])> = hashed.iter().map(|(k, v)| (*k, &v[..])).collect();
    let texts = [
        f.texts[0],
        data[0].as_ref().map(|d| &d[..]),
        data[1].as_ref().map(|d| &d[..]),
        data[2].as_ref().map(|d| &d[..]),
        f.texts[4],
    ];
    canonical_into(
        &mut out,
        2,
        f.saga,
        f.seq,
        f.kind,
        texts,
        f.recorded_at_us,
        &pairs,
    );
    out
}

fn vector_entries(file: &str) -> Vec<Json> {
    let chains = vectors(file);
    let mut out = Vec::new();
    for chain in chains.get("chains").items() {
        out.extend(chain.get("entries").items().iter().cloned());
    }
    out
}

#[test]
fn every_vector_entry_gets_its_canonical_bytes_and_hash() {
    let mut checked = 0;
    for (file, form) in [("chain-v1.json", 1), ("chain-v2.json", 2)] {
        let entries = vector_entries(file);
        assert!(!entries.is_empty(), "{file} holds entries");
        for e in &entries {
            let t = taken(e).expect("a vector entry is text and 64-bit integers");
            let place = format!("{file}: {} seq {}", e.get("saga_id").str(), t.fields.seq);
            assert_eq!(t.form, form, "{place}");
            assert_eq!(
                canonical(&t),
                hex_bytes(e.get("canonical_hex").str()),
                "{place}"
            );
            let prev = unhex(t.prev_hash).expect("a vector's previous hash is hex");
            let (hash, value) = link_encode_fields(
                HEADER,
                &prev,
                t.prev_hash.as_bytes(),
                &t.fields,
                t.form,
                &t.commitments,
                &t.salts,
            )
            .unwrap_or_else(|| panic!("{place}: handed back"));
            assert_eq!(
                std::str::from_utf8(&hash).unwrap(),
                e.get("hash").str(),
                "{place}"
            );
            // The message carries the same hash, then the form's tail (docs/adr/0003).
            let mut tail = Vec::new();
            avro_bytes(&mut tail, &hash);
            if form == 1 {
                tail.extend_from_slice(&FORM_1_TAIL);
            } else {
                avro_long(&mut tail, 2);
                avro_hex_map(&mut tail, &t.commitments);
                avro_hex_map(&mut tail, &t.salts);
                tail.push(0);
            }
            assert!(value.starts_with(HEADER), "{place}");
            assert!(value.ends_with(&tail), "{place}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} vector entries");
}

/// Negative reasons the writer itself must refuse: their entries are text and 64-bit integers,
/// so they reach it.
const REFUSED_BY_THE_WRITER: [&str; 7] = [
    "nul_in_text",
    "empty_name",
    "opening_mismatch",
    "missing_salt",
    "bad_commitment",
    "unknown_form",
    "seq_out_of_range",
];

#[test]
fn every_negative_vector_is_handed_back() {
    let mut reached = 0;
    let mut at_the_binding = 0;
    for file in ["negative-v1.json", "negative-v2.json"] {
        for case in vectors(file).get("cases").items() {
            let name = case.get("name").str();
            let reason = case.get("reason").str();
            let Some(t) = taken(case.get("entry")) else {
                // The binding cannot take it (PyO3 refuses the type or the range): the
                // caller's Python path raises. Only these reasons may end here.
                assert!(
                    !REFUSED_BY_THE_WRITER.contains(&reason) || name == "seq_beyond_int64",
                    "{file}: {name} ({reason}) must reach the writer"
                );
                at_the_binding += 1;
                continue;
            };
            let Some(prev) = unhex(t.prev_hash) else {
                // `link_entry` reads the previous hash itself and hands such a draft back;
                // `link_encode` is given its bytes by the caller, who refuses them first.
                assert_eq!(reason, "bad_prev_hash", "{file}: {name}");
                at_the_binding += 1;
                continue;
            };
            let out = link_encode_fields(
                HEADER,
                &prev,
                t.prev_hash.as_bytes(),
                &t.fields,
                t.form,
                &t.commitments,
                &t.salts,
            );
            assert!(out.is_none(), "{file}: {name} ({reason}) was written");
            reached += 1;
        }
    }
    assert!(
        reached >= 20,
        "only {reached} negative entries reached the writer"
    );
    assert!(
        at_the_binding >= 10,
        "only {at_the_binding} stopped at the binding"
    );
}
