//! The archive verifier's core in compiled code: parse a binary `COPY ... TO STDOUT` stream of
//! archived rows (the columns of `consumers/archive/_rows.py`'s `ROW_COLUMNS`, in chain order)
//! and check every link (docs/adr/0002-hash-chain.md).  Each saga's verdict is the one
//! `sagacity.chain.verify` gives for the entries those rows hold: the same reason, bad seq,
//! head and detail.  A row that is not a valid entry (which the reference path would refuse to
//! build) makes its saga's verdict "refer": the caller judges that saga by the reference path.
//! `sagacity.chain._fastverify` holds the Python twin; tests run both on the same
//! bytes.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;

use crate::grammar::{Event, Grammar};

const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";
const COLUMNS: i16 = 12;
const GENESIS: [u8; 32] = [0u8; 32];
const GENESIS_HEX: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const HEX: &[u8; 16] = b"0123456789abcdef";

/// A saga's verdict: (saga_id, ok, refer, events, length, head_seq, head_hash, bad_seq, reason,
/// detail, digests): `digests` holds the 32-byte hashes of the verified links, in seq order.
pub(crate) type Verdict = (
    String,
    bool,
    bool,
    i64,
    i64,
    i64,
    String,
    Option<i64>,
    Option<&'static str>,
    Option<String>,
    Cow<'static, [u8]>,
);

/// Why a stream is not a binary `COPY` of the archive's rows (the whole stream is refused; the
/// binding raises it as `ValueError` with this message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamError(pub(crate) String);

impl From<StreamError> for PyErr {
    fn from(error: StreamError) -> PyErr {
        PyValueError::new_err(error.0)
    }
}

struct Row<'a> {
    saga: &'a [u8],
    seq: i64,
    kind: &'a [u8],
    texts: [Option<&'a [u8]>; 5],
    attributes: &'a [u8],
    recorded_at_us: i64,
    prev_hash: &'a [u8],
    hash: &'a [u8],
}

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

/// A JSON string starting after its opening quote: its UTF-8 bytes and the index after its
/// closing quote.  `None` for anything an entry could not hold (U+0000, a lone surrogate).
fn json_string(data: &[u8], mut i: usize) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    loop {
        let c = *data.get(i)?;
        i += 1;
        match c {
            b'"' => return Some((out, i)),
            b'\\' => {
                let e = *data.get(i)?;
                i += 1;
                match e {
                    b'"' => out.push(b'"'),
                    b'\\' => out.push(b'\\'),
                    b'/' => out.push(b'/'),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'u' => {
                        let unit = |at: usize| -> Option<u32> {
                            let digits = std::str::from_utf8(data.get(at..at + 4)?).ok()?;
                            if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                                return None;
                            }
                            u32::from_str_radix(digits, 16).ok()
                        };
                        let first = unit(i)?;
                        i += 4;
                        let code = if (0xD800..0xDC00).contains(&first) {
                            if data.get(i) != Some(&b'\\') || data.get(i + 1) != Some(&b'u') {
                                return None;
                            }
                            let second = unit(i + 2)?;
                            if !(0xDC00..0xE000).contains(&second) {
                                return None;
                            }
                            i += 6;
                            0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                        } else if (0xDC00..0xE000).contains(&first) || first == 0 {
                            return None;
                        } else {
                            first
                        };
                        let ch = char::from_u32(code)?;
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    }
                    _ => return None,
                }
            }
            0..=0x1f => return None,
            _ => out.push(c),
        }
    }
}

fn skip_ws(data: &[u8], mut i: usize) -> usize {
    while i < data.len() && matches!(data[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The attribute pairs of a flat JSON object of strings (jsonb's text form), sorted by key as
/// the canonical form takes them, or `None` for anything else (another value type, a duplicate
/// key, invalid text).
fn attribute_pairs(data: &[u8]) -> Option<Pairs> {
    if data == b"{}" {
        return Some(Vec::new());
    }
    std::str::from_utf8(data).ok()?;
    let mut pairs: Pairs = Vec::new();
    let mut i = skip_ws(data, 0);
    if data.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(data, i + 1);
    if data.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            if data.get(i) != Some(&b'"') {
                return None;
            }
            let (key, next) = json_string(data, i + 1)?;
            i = skip_ws(data, next);
            if data.get(i) != Some(&b':') {
                return None;
            }
            i = skip_ws(data, i + 1);
            if data.get(i) != Some(&b'"') {
                return None;
            }
            let (value, next) = json_string(data, i + 1)?;
            pairs.push((key, value));
            i = skip_ws(data, next);
            match data.get(i) {
                Some(b',') => i = skip_ws(data, i + 1),
                Some(b'}') => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    if skip_ws(data, i) != data.len() {
        return None;
    }
    pairs.sort();
    if pairs.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    Some(pairs)
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

#[pyclass(module = "sagacity._sagacity_native")]
pub struct CopyChainVerifier {
    buf: Vec<u8>,
    started: bool,
    ended: bool,
    scope: Option<String>,
    anchors: HashMap<String, (i64, String)>,
    pub(crate) current: Option<Saga>,
    last_saga: Option<String>,
    scratch: Vec<u8>,
    /// Whether each saga's story is read on its rows too (`grammar.rs`; the audit's merge).
    pub(crate) stories: bool,
}

impl CopyChainVerifier {
    fn open(&self, id: String) -> Saga {
        let (after_seq, after_hash) = self
            .anchors
            .get(&id)
            .cloned()
            .unwrap_or((0, GENESIS_HEX.to_string()));
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

    /// Take the next bytes of the stream; the sagas it completed go to `out`.
    pub(crate) fn feed_sagas(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<Saga>,
    ) -> Result<(), StreamError> {
        if self.ended {
            if chunk.is_empty() {
                return Ok(());
            }
            return Err(bad("bytes after the trailer"));
        }
        self.buf.extend_from_slice(chunk);
        let data = std::mem::take(&mut self.buf);
        let mut at = 0usize;
        if !self.started {
            if data.len() < 19 {
                self.buf = data;
                return Ok(());
            }
            if &data[..11] != SIGNATURE {
                return Err(bad("the signature is missing"));
            }
            let extension = read_i32(&data, 15);
            if extension < 0 {
                return Err(bad("negative header extension"));
            }
            let skip = 19 + extension as usize;
            if data.len() < skip {
                self.buf = data;
                return Ok(());
            }
            at = skip;
            self.started = true;
        }
        let mut offsets = [(0usize, -1i32); 12];
        loop {
            if data.len() < at + 2 {
                break;
            }
            let count = read_i16(&data, at);
            if count == -1 {
                self.ended = true;
                at += 2;
                if at != data.len() {
                    return Err(bad("bytes after the trailer"));
                }
                break;
            }
            if count != COLUMNS {
                return Err(bad(&format!("a row has {count} columns, not {COLUMNS}")));
            }
            let mut p = at + 2;
            let mut complete = true;
            for slot in offsets.iter_mut() {
                if data.len() < p + 4 {
                    complete = false;
                    break;
                }
                let len = read_i32(&data, p);
                p += 4;
                if len < -1 {
                    return Err(bad("negative field length"));
                }
                if len >= 0 {
                    if data.len() < p + len as usize {
                        complete = false;
                        break;
                    }
                    *slot = (p, len);
                    p += len as usize;
                } else {
                    *slot = (p, -1);
                }
            }
            if !complete {
                break;
            }
            at = p;
            let get = |i: usize| -> Option<&[u8]> {
                let (start, len) = offsets[i];
                (len >= 0).then(|| &data[start..start + len as usize])
            };
            let int = |i: usize| -> Result<i64, StreamError> {
                match get(i) {
                    Some(d) if d.len() == 8 => Ok(i64::from_be_bytes(d.try_into().expect("8"))),
                    _ => Err(bad(&format!("column {} is not a bigint", i + 1))),
                }
            };
            let saga_bytes = get(0).ok_or_else(|| bad("a saga id is null"))?;
            let row = Row {
                saga: saga_bytes,
                seq: int(1)?,
                kind: get(2).unwrap_or(b""),
                texts: [get(3), get(4), get(5), get(6), get(7)],
                attributes: get(8).unwrap_or(b"\x00"),
                recorded_at_us: int(9)?,
                prev_hash: get(10).unwrap_or(b""),
                hash: get(11).unwrap_or(b"\x00"),
            };
            let key: &[u8] = match &self.scope {
                Some(s) => s.as_bytes(),
                None => row.saga,
            };
            let same = self
                .current
                .as_ref()
                .is_some_and(|s| s.id.as_bytes() == key);
            if !same {
                let id = std::str::from_utf8(key)
                    .map_err(|_| bad("a saga id is not UTF-8"))?
                    .to_string();
                if let Some(last) = &self.last_saga {
                    if last.as_bytes() >= key {
                        return Err(StreamError(format!(
                            "rows are not in chain order: saga {} after {}",
                            py_repr(&id),
                            py_repr(last)
                        )));
                    }
                }
                if let Some(done) = self.current.take() {
                    out.push(done);
                }
                self.last_saga = Some(id.clone());
                self.current = Some(self.open(id));
            }
            let saga = self.current.as_mut().expect("opened");
            Self::check(saga, &row, &mut self.scratch, self.stories);
        }
        self.buf = data[at..].to_vec();
        Ok(())
    }

    /// The end of the stream: the last saga (and, verifying one saga that has no rows, that
    /// saga, empty) go to `out`.
    pub(crate) fn finish_sagas(&mut self, out: &mut Vec<Saga>) -> Result<(), StreamError> {
        if !self.ended && (self.started || !self.buf.is_empty()) {
            return Err(bad("the stream ends before its trailer"));
        }
        if let Some(done) = self.current.take() {
            out.push(done);
        } else if let Some(scope) = self.scope.take() {
            let saga = self.open(scope);
            out.push(saga);
        }
        Ok(())
    }

    pub(crate) fn verdict(saga: Saga) -> Verdict {
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

    fn check(saga: &mut Saga, row: &Row, scratch: &mut Vec<u8>, stories: bool) {
        saga.events += 1;
        if !well_formed(row) {
            saga.refer = true;
        }
        if saga.refer {
            return;
        }
        if let Some(p) = &saga.pending {
            if row.seq == p.expected {
                let p = saga.pending.take().expect("pending");
                saga.broken = Some(Break {
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
        if saga.broken.is_some() || saga.pending.is_some() {
            // Past the first break only malformed rows matter (they send the saga to the
            // reference path, which builds every entry first).
            if attribute_pairs(row.attributes).is_none() {
                saga.refer = true;
            }
            return;
        }
        saga.count += 1;
        let expected = saga.expected;
        let fail = |saga: &mut Saga, reason: &'static str, detail: String| {
            saga.broken = Some(Break {
                reason,
                bad_seq: expected,
                length: saga.count,
                head_seq: expected - 1,
                head_hash: saga.prev_hex.clone(),
                detail,
            });
        };
        if row.saga != saga.id.as_bytes() {
            if !row.saga.iter().all(|b| (0x20..0x7f).contains(b)) {
                // Python's repr of such an id (which the detail quotes) is the reference's
                // to write.
                saga.refer = true;
                return;
            }
            let other = std::str::from_utf8(row.saga).unwrap_or("");
            fail(
                saga,
                "foreign_saga",
                format!("entry belongs to saga {}", py_repr(other)),
            );
        } else if expected == 1 && row.seq == 1 && row.prev_hash != GENESIS_HEX.as_bytes() {
            let prev = std::str::from_utf8(&row.prev_hash[..16]).unwrap_or("");
            fail(
                saga,
                "wrong_genesis",
                format!("seq 1 has previous hash {}…, not the genesis hash", prev),
            );
        } else if row.seq > expected {
            saga.pending = Some(Pending {
                expected,
                found: row.seq,
                length: saga.count,
                head_seq: expected - 1,
                head_hash: saga.prev_hex.clone(),
            });
        } else if row.seq < expected {
            fail(
                saga,
                "reordered",
                format!("seq {} found where seq {} was expected", row.seq, expected),
            );
        } else {
            let prev = unhex(row.prev_hash).expect("checked well formed");
            let Some(owned) = attribute_pairs(row.attributes) else {
                saga.refer = true;
                return;
            };
            let pairs: Vec<(&[u8], &[u8])> = owned
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            if hash_input(row, &pairs, &prev, scratch).is_none() {
                saga.refer = true;
                return;
            }
            let digest = Sha256::digest(&scratch[..]);
            let hex = hex_of(&digest);
            if hex.as_bytes() != row.hash {
                fail(
                    saga,
                    "edited",
                    "content does not match its recorded hash".to_string(),
                );
            } else if row.prev_hash != saga.prev_hex.as_bytes() {
                fail(
                    saga,
                    "broken_link",
                    "previous hash is not the preceding entry's".to_string(),
                );
            } else {
                if stories {
                    // The story's step on the same row (`grammar.rs`): texts are tool,
                    // payload, result, error, actor.
                    saga.grammar.feed(&Event {
                        seq: row.seq,
                        kind: row.kind,
                        tool: row.texts[0],
                        actor: row.texts[4],
                        attributes: &pairs,
                        payload: row.texts[1],
                        result: row.texts[2],
                    });
                }
                saga.prev.copy_from_slice(&digest);
                saga.digests.extend_from_slice(&digest);
                saga.prev_hex = hex;
                saga.expected += 1;
            }
            return;
        }
        // A break found without hashing: the row must still be an entry.
        if attribute_pairs(row.attributes).is_none() {
            saga.refer = true;
        }
    }
}

/// Python's `repr` of a str of printable ASCII, as the reference path writes it (`{saga_id!r}`).
fn py_repr(text: &str) -> String {
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

fn read_i16(data: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([data[at], data[at + 1]])
}

fn read_i32(data: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(data[at..at + 4].try_into().expect("4 bytes"))
}

fn bad(message: &str) -> StreamError {
    StreamError(format!(
        "not a binary COPY of the archive's rows: {message}"
    ))
}

#[pymethods]
impl CopyChainVerifier {
    /// `saga_id`: verify one saga (rows of another are `foreign_saga`), else every saga in the
    /// stream (rows grouped by saga, sagas in ascending byte order).  `anchors`: saga id ->
    /// (seq, hash) a saga's rows continue from (retention), genesis otherwise.
    #[new]
    #[pyo3(signature = (*, saga_id=None, anchors=None))]
    pub(crate) fn new(
        saga_id: Option<String>,
        anchors: Option<HashMap<String, (i64, String)>>,
    ) -> Self {
        CopyChainVerifier {
            buf: Vec::new(),
            started: false,
            ended: false,
            scope: saga_id,
            anchors: anchors.unwrap_or_default(),
            current: None,
            last_saga: None,
            scratch: Vec::with_capacity(1024),
            stories: false,
        }
    }

    /// Take the next bytes of the stream; returns the verdicts of the sagas it completed.
    fn feed(&mut self, chunk: &[u8]) -> PyResult<Vec<Verdict>> {
        let mut done = Vec::new();
        self.feed_sagas(chunk, &mut done)?;
        Ok(done.into_iter().map(Self::verdict).collect())
    }

    /// The end of the stream: the last saga's verdict (and, verifying one saga that has no
    /// rows, its empty verdict).
    fn finish(&mut self) -> PyResult<Vec<Verdict>> {
        let mut done = Vec::new();
        self.finish_sagas(&mut done)?;
        Ok(done.into_iter().map(Self::verdict).collect())
    }
}
