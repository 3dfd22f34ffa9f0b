//! The saga grammar's compiled twin (`grammar.rs`) over `grammar-v1.json`, the vectors the
//! grammar (`sagacity/chain/_grammar.py`) and the standalone verifier's copy are held to: each
//! case's findings (rule and seq), or the story left to the grammar where the twin does not
//! model it (an `ERASED`, an event type it does not know).

use super::json::{vectors, Json};
use crate::grammar::{event_types, Event, Grammar};

fn text(value: &Json) -> Option<Vec<u8>> {
    match value {
        Json::Null => None,
        other => Some(other.str().as_bytes().to_vec()),
    }
}

#[test]
fn the_twin_reads_every_case() {
    let file = vectors("grammar-v1.json");
    let mut judged = 0;
    for case in file.get("cases").items() {
        let name = case.get("name").str();
        let mut grammar = Grammar::after(case.get("after_seq").i64().expect("after_seq"));
        let mut left = false;
        for e in case.get("events").items() {
            let kind = e.get("event_type").str();
            left |= kind == "ERASED" || !event_types().contains(&kind);
            let mut owned: Vec<(Vec<u8>, Vec<u8>)> = match e.get("attributes") {
                Json::Null => Vec::new(),
                attributes => attributes
                    .members()
                    .iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), v.str().as_bytes().to_vec()))
                    .collect(),
            };
            owned.sort();
            let pairs: Vec<(&[u8], &[u8])> = owned
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            let (tool, actor) = (text(e.get("tool")), text(e.get("actor")));
            let (payload, result) = (text(e.get("payload")), text(e.get("result")));
            grammar.feed(&Event {
                seq: e.get("seq").i64().expect("seq"),
                kind: kind.as_bytes(),
                tool: tool.as_deref(),
                actor: actor.as_deref(),
                attributes: &pairs,
                payload: payload.as_deref(),
                result: result.as_deref(),
            });
        }
        assert_eq!(grammar.referred, left, "{name}");
        if grammar.referred {
            continue;
        }
        judged += 1;
        let expected: Vec<(String, i64)> = case
            .get("findings")
            .items()
            .iter()
            .map(|f| {
                let f = f.items();
                (f[0].str().to_string(), f[1].i64().expect("seq"))
            })
            .collect();
        let got: Vec<(String, i64)> = grammar
            .findings
            .iter()
            .map(|(rule, seq)| (rule.to_string(), *seq))
            .collect();
        assert_eq!(got, expected, "{name}");
    }
    assert!(judged >= 55, "{judged}");
}
