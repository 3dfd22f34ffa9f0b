//! The compiled chain walker (`verify.rs`, the archive's bulk verifier) over the vectors: every
//! case of `verdicts-v1.json` fed as a binary `COPY` of its rows gives the verdicts the vectors
//! record (reason, bad seq, head and detail: `sagacity.chain.verify`'s), however the stream is
//! cut into chunks; no chain holding an entry of `negative-v1.json` passes.

use std::collections::HashMap;

use super::json::{quote, vectors, Json};
use crate::verify::{CopyChainVerifier, Saga, StreamError, Verdict};

const GENESIS_HEX: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A binary `COPY` of `rows` (the archive's twelve columns; seq and time as `bigint`), as
/// PostgreSQL writes it and `tests/conformance` builds it.
fn copy_binary(rows: &[Vec<Json>]) -> Vec<u8> {
    let mut out = b"PGCOPY\n\xff\r\n\x00".to_vec();
    out.extend_from_slice(&[0; 8]);
    for row in rows {
        out.extend_from_slice(&(row.len() as i16).to_be_bytes());
        for (column, value) in row.iter().enumerate() {
            match value {
                Json::Null => out.extend_from_slice(&(-1i32).to_be_bytes()),
                Json::Int(n) if column == 1 || column == 9 => {
                    out.extend_from_slice(&8i32.to_be_bytes());
                    out.extend_from_slice(&i64::try_from(*n).expect("int64").to_be_bytes());
                }
                Json::Str(s) => {
                    out.extend_from_slice(&(s.len() as i32).to_be_bytes());
                    out.extend_from_slice(s.as_bytes());
                }
                other => panic!("column {column} cannot hold {other:?}"),
            }
        }
    }
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out
}

/// The verdicts of a walk over `stream`, fed `chunk` bytes at a time.
fn walk(
    stream: &[u8],
    saga_id: Option<String>,
    anchors: HashMap<String, (i64, String)>,
    chunk: usize,
) -> Result<Vec<Verdict>, StreamError> {
    let mut verifier = CopyChainVerifier::new(saga_id, Some(anchors));
    let mut sagas = Vec::new();
    for piece in stream.chunks(chunk) {
        verifier.feed_sagas(piece, &mut sagas)?;
    }
    verifier.finish_sagas(&mut sagas)?;
    Ok(sagas.into_iter().map(Saga::verdict).collect())
}

fn optional_int(value: &Json) -> Option<i64> {
    match value {
        Json::Null => None,
        other => Some(other.i64().expect("an int64")),
    }
}

fn optional_str(value: &Json) -> Option<&str> {
    match value {
        Json::Null => None,
        other => Some(other.str()),
    }
}

/// `got` is the vector's `expected` verdict: every field it records (a saga referred to the
/// reference path records only its events).
fn assert_verdict(got: &Verdict, expected: &Json, case: &str) {
    let (saga, ok, refer, events, length, head_seq, head_hash, bad_seq, reason, detail, _) = got;
    let at = format!("{case}: saga {saga}");
    assert_eq!(saga.as_str(), expected.get("saga_id").str(), "{at}");
    assert_eq!(*ok, expected.get("ok") == &Json::Bool(true), "{at}");
    assert_eq!(*refer, expected.get("refer") == &Json::Bool(true), "{at}");
    assert_eq!(i128::from(*events), expected.get("events").int(), "{at}");
    if *refer {
        return;
    }
    assert_eq!(i128::from(*length), expected.get("length").int(), "{at}");
    assert_eq!(
        i128::from(*head_seq),
        expected.get("head_seq").int(),
        "{at}"
    );
    assert_eq!(head_hash.as_str(), expected.get("head_hash").str(), "{at}");
    assert_eq!(*bad_seq, optional_int(expected.get("bad_seq")), "{at}");
    assert_eq!(*reason, optional_str(expected.get("reason")), "{at}");
    assert_eq!(
        detail.as_deref(),
        optional_str(expected.get("detail")),
        "{at}"
    );
}

#[test]
fn every_verdict_vector_is_given_however_the_stream_is_cut() {
    let file = vectors("verdicts-v1.json");
    let cases = file.get("cases").items();
    assert!(cases.len() >= 15, "verdicts-v1.json holds its cases");
    let mut reasons = Vec::new();
    for case in cases {
        let name = case.get("name").str();
        let rows: Vec<Vec<Json>> = case
            .get("rows")
            .items()
            .iter()
            .map(|r| r.items().to_vec())
            .collect();
        let saga_id = optional_str(case.get("saga_id")).map(str::to_string);
        let anchors: HashMap<String, (i64, String)> = case
            .get("anchors")
            .members()
            .iter()
            .map(|(saga, link)| {
                let link = link.items();
                let seq = link[0].i64().expect("an anchor's seq");
                (saga.clone(), (seq, link[1].str().to_string()))
            })
            .collect();
        let stream = copy_binary(&rows);
        let expected = case.get("verdicts").items();
        for chunk in [stream.len().max(1), 7, 1] {
            let got = walk(&stream, saga_id.clone(), anchors.clone(), chunk)
                .unwrap_or_else(|e| panic!("{name}: the stream was refused: {}", e.0));
            assert_eq!(got.len(), expected.len(), "{name}: one verdict per saga");
            for (verdict, wanted) in got.iter().zip(expected) {
                assert_verdict(verdict, wanted, name);
            }
        }
        reasons.extend(
            expected
                .iter()
                .filter_map(|v| optional_str(v.get("reason"))),
        );
    }
    // Every way a chain breaks is among them.
    for reason in [
        "gap",
        "reordered",
        "edited",
        "broken_link",
        "wrong_genesis",
        "foreign_saga",
    ] {
        assert!(reasons.contains(&reason), "no case breaks with {reason}");
    }
}

/// The archive row of a vector entry (`None`: its columns cannot hold it, as
/// `tests/conformance` judges: text, 64-bit integers, attributes a map of text).
fn row_of(e: &Json) -> Option<Vec<Json>> {
    let mut row = Vec::new();
    for name in [
        "saga_id",
        "seq",
        "event_type",
        "tool",
        "payload",
        "result",
        "error",
        "actor",
    ] {
        let value = e.get(name);
        match (name, value) {
            ("seq", v) => row.push(Json::Int(i128::from(v.i64()?))),
            (_, Json::Null | Json::Str(_)) => row.push(value.clone()),
            _ => return None,
        }
    }
    let attributes = match e.get("attributes") {
        Json::Null => "{}".to_string(),
        Json::Object(members) => {
            let mut parts = Vec::new();
            for (k, v) in members {
                let Json::Str(v) = v else { return None };
                parts.push(format!("{}: {}", quote(k), quote(v)));
            }
            format!("{{{}}}", parts.join(", "))
        }
        _ => return None,
    };
    row.push(Json::Str(attributes));
    row.push(Json::Int(i128::from(e.get("recorded_at_us").i64()?)));
    match e.get("prev_hash") {
        Json::Str(s) => row.push(Json::Str(s.clone())),
        _ => return None,
    }
    match e.get("hash") {
        Json::Str(s) => row.push(Json::Str(s.clone())),
        _ => return None,
    }
    Some(row)
}

#[test]
fn no_chain_holding_a_negative_entry_passes() {
    let mut walked = 0;
    for case in vectors("negative-v1.json").get("cases").items() {
        let name = case.get("name").str();
        let Some(row) = row_of(case.get("entry")) else {
            continue; // the archive's columns cannot hold it
        };
        let stream = copy_binary(&[row]);
        match walk(&stream, Some("neg-1".to_string()), HashMap::new(), 64) {
            Err(_) => {} // refused whole: not the archive's rows
            Ok(verdicts) => {
                assert_eq!(verdicts.len(), 1, "{name}");
                assert!(!verdicts[0].1, "{name}: a chain holding it passed");
            }
        }
        walked += 1;
    }
    assert!(walked >= 10, "only {walked} negative entries walked");
}

#[test]
fn a_stream_that_is_not_the_archives_rows_is_refused_whole() {
    let mut stream = copy_binary(&[]);
    stream[0] = b'X';
    let refused = walk(&stream, None, HashMap::new(), 64).expect_err("no signature");
    assert!(
        refused.0.contains("the signature is missing"),
        "{}",
        refused.0
    );
    let mut anchors = HashMap::new();
    anchors.insert("s".to_string(), (0, GENESIS_HEX.to_string()));
    let truncated = copy_binary(&[]);
    let refused =
        walk(&truncated[..truncated.len() - 1], None, anchors, 64).expect_err("no trailer");
    assert!(
        refused.0.contains("ends before its trailer"),
        "{}",
        refused.0
    );
}
