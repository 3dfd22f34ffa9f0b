//! The archive verifier's core in compiled code: parse a binary `COPY ... TO STDOUT` stream of
//! archived rows (the columns of `consumers/archive/_rows.py`'s `ROW_COLUMNS`, in chain order)
//! and check every link (docs/adr/0002-hash-chain.md).  Each saga's verdict is the one
//! `sagacity.chain.verify` gives for the entries those rows hold: the same reason, bad seq,
//! head and detail.  A row that is not a valid entry (which the reference path would refuse to
//! build) makes its saga's verdict "refer": the caller judges that saga by the reference path.
//! `sagacity.chain._fastverify` holds the Python twin; tests run both on the same
//! bytes.
//!
//! Its rooms: this module, the stream's rows handed to their sagas; `copy`, the binary `COPY`
//! framing; `jsonb`, the attributes column's text; `saga`, one saga's chain walk and verdict.

use pyo3::prelude::*;
use std::borrow::Cow;
use std::collections::HashMap;

mod copy;
mod jsonb;
mod saga;

pub(crate) use copy::StreamError;
use copy::{bad, Frame, Row};
use saga::py_repr;
pub(crate) use saga::Saga;

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
        let anchor = self.anchors.get(&id).cloned();
        Saga::after(id, anchor)
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
            let Some(skip) = copy::header(&data)? else {
                self.buf = data;
                return Ok(());
            };
            at = skip;
            self.started = true;
        }
        let mut offsets = [(0usize, -1i32); 12];
        loop {
            match copy::frame(&data, at, &mut offsets)? {
                Frame::Partial => break,
                Frame::Trailer => {
                    self.ended = true;
                    at += 2;
                    if at != data.len() {
                        return Err(bad("bytes after the trailer"));
                    }
                    break;
                }
                Frame::Row(next) => {
                    at = next;
                    let row = copy::row(&data, &offsets)?;
                    self.walk(&row, out)?;
                }
            }
        }
        self.buf = data[at..].to_vec();
        Ok(())
    }

    /// The row goes to its saga's walk (verifying one saga, to that one); a row of a saga after
    /// the current one completes the current one, to `out`.
    fn walk(&mut self, row: &Row, out: &mut Vec<Saga>) -> Result<(), StreamError> {
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
        saga.check(row, &mut self.scratch, self.stories);
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
        Ok(done.into_iter().map(Saga::verdict).collect())
    }

    /// The end of the stream: the last saga's verdict (and, verifying one saga that has no
    /// rows, its empty verdict).
    fn finish(&mut self) -> PyResult<Vec<Verdict>> {
        let mut done = Vec::new();
        self.finish_sagas(&mut done)?;
        Ok(done.into_iter().map(Saga::verdict).collect())
    }
}
