//! The audit's per-saga merge in compiled code: the chain verifier's verdicts (`verify.rs`)
//! merged by saga id with the saga's signed checkpoints, its recorded head and its retention
//! anchor, the way `sagacity.consumers.archive._audit.iter_audits` merges them.  A saga whose
//! chain verified, whose every checkpoint belongs to a verified signing round and names a
//! (seq, hash) of that chain, and whose recorded head is the chain's head is judged here; any
//! other saga (a broken or unjudgeable chain, a disagreement, a checkpoint signed on its own, a
//! saga without rows) is handed back, with what was read for it, to the Python path, which
//! explains every finding.  Only what one fetch of checkpoints and heads holds, and the sagas
//! of one block of the stream, are held at a time.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::collections::{HashMap, HashSet, VecDeque};

use crate::verify::{CopyChainVerifier, Saga, Verdict};

const HEX: &[u8; 16] = b"0123456789abcdef";
const GENESIS_HEX: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A checkpoint row (saga_id, seq, hash, signed_at_us, key_id, signature, round_id,
/// leaf_index): its saga, what the merge compares, and the row itself for the Python path.
struct Cp {
    saga: String,
    /// (seq, hash, round_id) when those columns hold what a checkpoint of a round holds.
    fields: Option<(i64, String, i64)>,
    row: PyObject,
}

/// A recorded head row (saga_id, head_seq, head_hash).
struct Head {
    saga: String,
    fields: Option<(i64, String)>,
    row: PyObject,
}

/// One source of rows ordered by saga id, read a fetch at a time.
struct Source<T> {
    rows: VecDeque<T>,
    done: bool,
    last: Option<String>,
}

impl<T> Source<T> {
    fn new() -> Self {
        Source {
            rows: VecDeque::new(),
            done: false,
            last: None,
        }
    }

    /// Whether every row of saga `key` is buffered (or the source needs another fetch).
    fn holds(&self, key: &str) -> bool {
        self.done
            || self
                .last
                .as_deref()
                .is_some_and(|l| l.as_bytes() > key.as_bytes())
    }

    fn check_order(&mut self, saga: &str, what: &str) -> PyResult<()> {
        if let Some(last) = &self.last {
            if last.as_bytes() > saga.as_bytes() {
                return Err(PyValueError::new_err(format!(
                    "{what} rows are not in saga id order: {saga:?} after {last:?}"
                )));
            }
        }
        self.last = Some(saga.to_string());
        Ok(())
    }
}

fn hex_at(digests: &[u8], index: usize) -> Option<String> {
    let digest = digests.get(32 * index..32 * index + 32)?;
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push(HEX[(byte >> 4) as usize] as char);
        out.push(HEX[(byte & 0x0f) as usize] as char);
    }
    Some(out)
}

fn saga_of(row: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    row.get_item(0)?
        .extract::<String>()
        .map_err(|_| PyTypeError::new_err(format!("a {what} row's saga id is not text")))
}

/// A saga whose rows have all been read, its story's state reduced to its verdict.
fn settled(mut saga: Saga) -> Saga {
    saga.grammar.settle();
    saga
}

#[pyclass(module = "sagacity._sagacity_native")]
pub struct ChainAuditor {
    verifier: CopyChainVerifier,
    anchors: HashMap<String, (i64, String)>,
    anchor_keys: Vec<String>,
    next_anchor: usize,
    failed_rounds: HashSet<i64>,
    refer: HashSet<String>,
    stories: bool,
    ready: VecDeque<Saga>,
    chain_done: bool,
    checkpoints: Source<Cp>,
    heads: Source<Head>,
}

/// The audit of a saga judged here (its chain, checkpoints, head and story all pass):
/// (saga_id, True, events, head_seq, head_hash, checkpoints, signed_seq, unsigned); or one
/// handed back: (saga_id, False, verdict or None, checkpoint rows, head rows), followed, where
/// the auditor reads stories, by `story_clean`: the grammar's twin found nothing in the saga's
/// story and left nothing in it to the Python grammar.
fn judged(
    py: Python<'_>,
    verdict: &Verdict,
    checked: i64,
    signed_seq: i64,
    unsigned: i64,
) -> PyResult<PyObject> {
    Ok((
        verdict.0.as_str(),
        true,
        verdict.3,
        verdict.5,
        verdict.6.as_str(),
        checked,
        signed_seq,
        unsigned,
    )
        .into_pyobject(py)?
        .into_any()
        .unbind())
}

impl ChainAuditor {
    /// The next saga of the merge, if every source has read past it; whether the checkpoints
    /// or the heads need another fetch to tell.
    fn next_key(&self) -> (Option<String>, bool, bool) {
        let key: Option<&str> = [
            self.ready.front().map(|s| s.id.as_str()),
            self.checkpoints.rows.front().map(|c| c.saga.as_str()),
            self.heads.rows.front().map(|h| h.saga.as_str()),
            self.anchor_keys.get(self.next_anchor).map(String::as_str),
        ]
        .into_iter()
        .flatten()
        .min_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let need = |holds: bool, done: bool| !done && !holds;
        match key {
            None => (
                None,
                need(false, self.checkpoints.done),
                need(false, self.heads.done),
            ),
            Some(k) => {
                let need_cps = need(self.checkpoints.holds(k), self.checkpoints.done);
                let need_heads = need(self.heads.holds(k), self.heads.done);
                let chain_past = self.chain_done
                    || self.ready.front().is_some()
                    || self
                        .verifier
                        .current
                        .as_ref()
                        .is_some_and(|c| c.id.as_bytes() > k.as_bytes());
                if need_cps || need_heads || !chain_past {
                    (None, need_cps, need_heads)
                } else {
                    (Some(k.to_string()), false, false)
                }
            }
        }
    }

    fn judge(
        &self,
        py: Python<'_>,
        key: String,
        saga: Option<Saga>,
        cps: Vec<Cp>,
        heads: Vec<Head>,
    ) -> PyResult<PyObject> {
        // The story read on the same rows (`grammar.rs`): clean, or the Python grammar's.
        let story_clean = !self.stories || saga.as_ref().is_none_or(|s| s.grammar.clean());
        let verdict = saga.map(Saga::verdict);
        if let Some(v) = &verdict {
            if let Some(done) = self.agree(v, &cps, &heads).filter(|_| story_clean) {
                let (checked, signed_seq, unsigned) = done;
                return judged(py, v, checked, signed_seq, unsigned);
            }
        }
        let cp_rows: Vec<PyObject> = cps.into_iter().map(|c| c.row).collect();
        let head_rows: Vec<PyObject> = heads.into_iter().map(|h| h.row).collect();
        let back = if self.stories {
            (key, false, verdict, cp_rows, head_rows, story_clean)
                .into_pyobject(py)?
                .into_any()
        } else {
            (key, false, verdict, cp_rows, head_rows)
                .into_pyobject(py)?
                .into_any()
        };
        Ok(back.unbind())
    }

    /// (checkpoints, signed_seq, unsigned) when the saga passes as the Python path would pass
    /// it; `None` for anything it would not pass at once (the Python path then judges).
    fn agree(&self, v: &Verdict, cps: &[Cp], heads: &[Head]) -> Option<(i64, i64, i64)> {
        let (saga_id, ok, refer, head_seq, head_hash, digests) = (&v.0, v.1, v.2, v.5, &v.6, &v.10);
        if !ok || refer || self.refer.contains(saga_id) {
            return None;
        }
        let (after_seq, after_hash) = self
            .anchors
            .get(saga_id)
            .map(|(s, h)| (*s, h.as_str()))
            .unwrap_or((0, GENESIS_HEX));
        let mut signed_seq = 0i64;
        for cp in cps {
            let (seq, hash, round_id) = cp.fields.as_ref()?;
            if self.failed_rounds.contains(round_id) {
                return None;
            }
            signed_seq = signed_seq.max(*seq);
            if *seq < after_seq {
                continue;
            }
            if *seq > head_seq {
                return None;
            }
            let matches = if *seq == after_seq {
                after_hash == hash
            } else {
                let index = usize::try_from(*seq - after_seq - 1).ok()?;
                hex_at(digests, index)? == *hash
            };
            if !matches {
                return None;
            }
        }
        match heads {
            [] if head_seq > after_seq => return None,
            [] => {}
            [head] => {
                let (seq, hash) = head.fields.as_ref()?;
                if *seq != head_seq || hash != head_hash {
                    return None;
                }
            }
            _ => return None,
        }
        let unsigned = (head_seq - signed_seq.max(after_seq)).max(0);
        Some((cps.len() as i64, signed_seq, unsigned))
    }

    fn take_of<T>(source: &mut Source<T>, key: &str, saga: impl Fn(&T) -> &str) -> Vec<T> {
        let mut out = Vec::new();
        while source.rows.front().is_some_and(|r| saga(r) == key) {
            out.extend(source.rows.pop_front());
        }
        out
    }
}

#[pymethods]
impl ChainAuditor {
    /// `anchors`: saga id -> (seq, hash) a saga's rows continue from (retention);
    /// `failed_rounds`: the signing rounds that did not verify; `refer`: sagas the Python path
    /// judges whatever their rows (an anchor whose retention record failed); `stories`: each
    /// saga's story is read on the same rows (`grammar.rs`), and a saga judged here has a clean
    /// one too (without it, the story is the caller's to read).
    #[new]
    #[pyo3(signature = (*, anchors, failed_rounds, refer, stories=false))]
    fn new(
        anchors: HashMap<String, (i64, String)>,
        failed_rounds: HashSet<i64>,
        refer: HashSet<String>,
        stories: bool,
    ) -> Self {
        let mut anchor_keys: Vec<String> = anchors.keys().cloned().collect();
        anchor_keys.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let mut verifier = CopyChainVerifier::new(None, Some(anchors.clone()));
        verifier.stories = stories;
        ChainAuditor {
            verifier,
            anchors,
            anchor_keys,
            next_anchor: 0,
            failed_rounds,
            refer,
            stories,
            ready: VecDeque::new(),
            chain_done: false,
            checkpoints: Source::new(),
            heads: Source::new(),
        }
    }

    /// The next bytes of the binary `COPY` stream of the rows (as `CopyChainVerifier.feed`).
    fn feed(&mut self, chunk: &[u8]) -> PyResult<()> {
        let mut done = Vec::new();
        self.verifier.feed_sagas(chunk, &mut done)?;
        self.ready.extend(done.into_iter().map(settled));
        Ok(())
    }

    /// The stream of rows has ended.
    fn finish(&mut self) -> PyResult<()> {
        let mut done = Vec::new();
        self.verifier.finish_sagas(&mut done)?;
        self.ready.extend(done.into_iter().map(settled));
        self.chain_done = true;
        Ok(())
    }

    /// The next fetch of checkpoint rows, in saga id order; an empty one ends them.
    fn add_checkpoints(&mut self, rows: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
        if rows.is_empty() {
            self.checkpoints.done = true;
        }
        for row in rows {
            let saga = saga_of(&row, "checkpoint")?;
            self.checkpoints.check_order(&saga, "checkpoint")?;
            let fields = (|| -> PyResult<Option<(i64, String, i64)>> {
                let round_id = row.get_item(6)?;
                if round_id.is_none() {
                    return Ok(None); // signed on its own: the Python path checks its signature
                }
                Ok(Some((
                    row.get_item(1)?.extract()?,
                    row.get_item(2)?.extract()?,
                    round_id.extract()?,
                )))
            })()
            .unwrap_or(None);
            self.checkpoints.rows.push_back(Cp {
                saga,
                fields,
                row: row.unbind(),
            });
        }
        Ok(())
    }

    /// The next fetch of recorded head rows, in saga id order; an empty one ends them.
    fn add_heads(&mut self, rows: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
        if rows.is_empty() {
            self.heads.done = true;
        }
        for row in rows {
            let saga = saga_of(&row, "head")?;
            self.heads.check_order(&saga, "head")?;
            let fields = (|| -> PyResult<(i64, String)> {
                Ok((row.get_item(1)?.extract()?, row.get_item(2)?.extract()?))
            })()
            .ok();
            self.heads.rows.push_back(Head {
                saga,
                fields,
                row: row.unbind(),
            });
        }
        Ok(())
    }

    /// The audits the sources read so far decide, in saga id order, and whether the merge
    /// waits for another fetch of checkpoints, of heads (else it waits for more of the stream,
    /// or is over).
    fn take(&mut self, py: Python<'_>) -> PyResult<(Vec<PyObject>, bool, bool)> {
        let mut out = Vec::new();
        loop {
            let (key, need_cps, need_heads) = self.next_key();
            let Some(key) = key else {
                return Ok((out, need_cps, need_heads));
            };
            let saga = if self.ready.front().is_some_and(|s| s.id == key) {
                self.ready.pop_front()
            } else {
                None
            };
            let cps = Self::take_of(&mut self.checkpoints, &key, |c| c.saga.as_str());
            let heads = Self::take_of(&mut self.heads, &key, |h| h.saga.as_str());
            if self.anchor_keys.get(self.next_anchor) == Some(&key) {
                self.next_anchor += 1;
            }
            out.push(self.judge(py, key, saga, cps, heads)?);
        }
    }
}
