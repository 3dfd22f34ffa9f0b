//! One saga's chain walk over its archived rows: each row linked to the one before (its seq,
//! its previous hash, its hash recomputed over the canonical form), the first break kept, and
//! the verdict `sagacity.chain.verify` gives.  A row that is not a valid entry makes the saga's
//! verdict "refer" (the reference path judges it).

use sha2::{Digest, Sha256};
use std::borrow::Cow;

use super::copy::Row;
use super::jsonb::attribute_pairs;
use super::Verdict;
use crate::grammar::{Event, Grammar};

const GENESIS: [u8; 32] = [0u8; 32];
const GENESIS_HEX: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const HEX: &[u8; 16] = b"0123456789abcdef";

struct Break {
    reason: &'static str,
    bad_seq: i64,
    length: i64,
    head_seq: i64,
    head_hash: String,
    detail: String,
}

/// A higher seq than expected: a gap, unless the expected seq is stored later (a swap).
struct Pending {
    expected: i64,
    found: i64,
    length: i64,
    head_seq: i64,
    head_hash: String,
}

pub(crate) struct Saga {
    pub(crate) id: String,
    expected: i64,
    prev: [u8; 32],
    prev_hex: String,
    count: i64,
    events: i64,
    refer: bool,
    broken: Option<Break>,
    pending: Option<Pending>,
    digests: Vec<u8>,
    /// The saga grammar over the rows linked so far.
    pub(crate) grammar: Grammar,
}

fn hex_of(digest: &[u8]) -> String {
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push(HEX[(byte >> 4) as usize] as char);
        out.push(HEX[(byte & 0x0f) as usize] as char);
    }
    out
}

fn unhex(text: &[u8]) -> Option<[u8; 32]> {
    // Exactly 64 hex digits; anything else (which `bytes.fromhex` may still take, e.g. with
    // spaces) is left to the reference path.
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for i in 0..32 {
        let hi = (text[2 * i] as char).to_digit(16)?;
        let lo = (text[2 * i + 1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

fn valid_text(data: &[u8]) -> bool {
    !data.contains(&0) && std::str::from_utf8(data).is_ok()
}

/// `prev || C(entry)` for a row whose attributes are `pairs` (sorted by key), written by the
/// crate's one writer of the form (`crate::canonical_into`), or `None` when the row is not a
/// valid entry.
fn hash_input(
    row: &Row,
    pairs: &[(&[u8], &[u8])],
    prev: &[u8; 32],
    out: &mut Vec<u8>,
) -> Option<()> {
    out.clear();
    out.extend_from_slice(prev);
    crate::canonical_into(
        out,
        1,
        row.saga,
        row.seq,
        row.kind,
        row.texts,
        row.recorded_at_us,
        pairs,
    );
    if out.len() - 32 >= u32::MAX as usize {
        return None;
    }
    Some(())
}

/// Whether a row holds a valid entry (what building a `JournalEntry` from it would accept).
fn well_formed(row: &Row) -> bool {
    !row.saga.is_empty()
        && valid_text(row.saga)
        && row.seq >= 1
        && !row.kind.is_empty()
        && valid_text(row.kind)
        && row.texts.iter().flatten().all(|t| valid_text(t))
        && unhex(row.prev_hash).is_some()
        && std::str::from_utf8(row.hash).is_ok()
}

impl Saga {
    /// A saga whose rows continue from `anchor` (seq, hash), genesis without one.
    pub(super) fn after(id: String, anchor: Option<(i64, String)>) -> Saga {
        let (after_seq, after_hash) = anchor.unwrap_or((0, GENESIS_HEX.to_string()));
        let prev = unhex(after_hash.as_bytes());
        let mut saga = Saga {
            id,
            expected: after_seq + 1,
            prev: prev.unwrap_or(GENESIS),
            prev_hex: after_hash,
            count: 0,
            events: 0,
            refer: false,
            broken: None,
            pending: None,
            digests: Vec::new(),
            grammar: Grammar::default(),
        };
        if prev.is_none() {
            saga.refer = true; // an anchor that is not a hash: the reference path explains
        }
        saga
    }

    /// The saga's verdict, once its rows are all read.
    pub(crate) fn verdict(self) -> Verdict {
        let saga = self;
        let mut broken = saga.broken;
        if let Some(p) = saga.pending {
            // The expected seq never appeared later: a deletion.
            broken = Some(Break {
                reason: "gap",
                bad_seq: p.expected,
                length: p.length,
                head_seq: p.head_seq,
                head_hash: p.head_hash,
                detail: format!("seq {} is missing (found {})", p.expected, p.found),
            });
        }
        if saga.refer {
            return (
                saga.id,
                false,
                true,
                saga.events,
                0,
                0,
                String::new(),
                None,
                None,
                None,
                Cow::Owned(Vec::new()),
            );
        }
        let digests = Cow::Owned(saga.digests);
        match broken {
            None => (
                saga.id,
                true,
                false,
                saga.events,
                saga.count,
                saga.expected - 1,
                saga.prev_hex,
                None,
                None,
                None,
                digests,
            ),
            Some(b) => (
                saga.id,
                false,
                false,
                saga.events,
                b.length,
                b.head_seq,
                b.head_hash,
                Some(b.bad_seq),
                Some(b.reason),
                Some(b.detail),
                digests,
            ),
        }
    }

    /// Walk one more of the saga's rows; with `stories`, its story's step too.
    pub(super) fn check(&mut self, row: &Row, scratch: &mut Vec<u8>, stories: bool) {
        self.events += 1;
        if !well_formed(row) {
            self.refer = true;
        }
        if self.refer {
            return;
        }
        self.swapped(row);
        if self.broken.is_some() || self.pending.is_some() {
            // Past the first break only malformed rows matter (they send the saga to the
            // reference path, which builds every entry first).
            self.refer_unless_entry(row);
            return;
        }
        self.count += 1;
        let expected = self.expected;
        if row.saga != self.id.as_bytes() {
            if !row.saga.iter().all(|b| (0x20..0x7f).contains(b)) {
                // Python's repr of such an id (which the detail quotes) is the reference's
                // to write.
                self.refer = true;
                return;
            }
            let other = std::str::from_utf8(row.saga).unwrap_or("");
            self.fail(
                "foreign_saga",
                format!("entry belongs to saga {}", py_repr(other)),
            );
        } else if expected == 1 && row.seq == 1 && row.prev_hash != GENESIS_HEX.as_bytes() {
            let prev = std::str::from_utf8(&row.prev_hash[..16]).unwrap_or("");
            self.fail(
                "wrong_genesis",
                format!("seq 1 has previous hash {}…, not the genesis hash", prev),
            );
        } else if row.seq > expected {
            self.pending = Some(Pending {
                expected,
                found: row.seq,
                length: self.count,
                head_seq: expected - 1,
                head_hash: self.prev_hex.clone(),
            });
        } else if row.seq < expected {
            self.fail(
                "reordered",
                format!("seq {} found where seq {} was expected", row.seq, expected),
            );
        } else {
            self.link(row, scratch, stories);
            return;
        }
        // A break found without hashing: the row must still be an entry.
        self.refer_unless_entry(row);
    }

    /// A gap pending, and this row holds the seq it missed: the rows were swapped.
    fn swapped(&mut self, row: &Row) {
        if let Some(p) = &self.pending {
            if row.seq == p.expected {
                let p = self.pending.take().expect("pending");
                self.broken = Some(Break {
                    reason: "reordered",
                    bad_seq: p.expected,
                    length: p.length,
                    head_seq: p.head_seq,
                    head_hash: p.head_hash,
                    detail: format!(
                        "seq {} found where seq {} was expected (seq {} is stored later)",
                        p.found, p.expected, p.expected
                    ),
                });
            }
        }
    }

    /// The saga breaks at the seq expected, after the rows linked so far.
    fn fail(&mut self, reason: &'static str, detail: String) {
        self.broken = Some(Break {
            reason,
            bad_seq: self.expected,
            length: self.count,
            head_seq: self.expected - 1,
            head_hash: self.prev_hex.clone(),
            detail,
        });
    }

    /// A row that is not an entry (its attributes unreadable) sends the saga to the reference.
    fn refer_unless_entry(&mut self, row: &Row) {
        if attribute_pairs(row.attributes).is_none() {
            self.refer = true;
        }
    }

    /// The row at the seq expected: hashed over the canonical form and linked, or the break.
    fn link(&mut self, row: &Row, scratch: &mut Vec<u8>, stories: bool) {
        let prev = unhex(row.prev_hash).expect("checked well formed");
        let Some(owned) = attribute_pairs(row.attributes) else {
            self.refer = true;
            return;
        };
        let pairs: Vec<(&[u8], &[u8])> = owned
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        if hash_input(row, &pairs, &prev, scratch).is_none() {
            self.refer = true;
            return;
        }
        let digest = Sha256::digest(&scratch[..]);
        let hex = hex_of(&digest);
        if hex.as_bytes() != row.hash {
            self.fail(
                "edited",
                "content does not match its recorded hash".to_string(),
            );
        } else if row.prev_hash != self.prev_hex.as_bytes() {
            self.fail(
                "broken_link",
                "previous hash is not the preceding entry's".to_string(),
            );
        } else {
            if stories {
                // The story's step on the same row (`grammar.rs`): texts are tool,
                // payload, result, error, actor.
                self.grammar.feed(&Event {
                    seq: row.seq,
                    kind: row.kind,
                    tool: row.texts[0],
                    actor: row.texts[4],
                    attributes: &pairs,
                    payload: row.texts[1],
                    result: row.texts[2],
                });
            }
            self.prev.copy_from_slice(&digest);
            self.digests.extend_from_slice(&digest);
            self.prev_hex = hex;
            self.expected += 1;
        }
    }
}

/// Python's `repr` of a str of printable ASCII, as the reference path writes it (`{saga_id!r}`).
pub(super) fn py_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}
