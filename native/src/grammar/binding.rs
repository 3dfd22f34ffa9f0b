//! The saga grammar's compiled twin (`grammar.rs`) called from Python on a saga's events, so
//! that the conformance suite holds it to `sagacity/chain/_grammar.py` on the vectors and on
//! random stories (`tests/conformance/test_grammar_compiled.py`).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::grammar::{Event, Grammar};

fn optional_bytes(value: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if value.is_none() {
        return Ok(None);
    }
    Ok(Some(value.extract::<String>()?.into_bytes()))
}

/// The compiled twin over one saga's events, for tests: each event a tuple (seq, event_type,
/// tool, actor, attributes, payload, result) as `_grammar.Row` holds it (attributes a dict of
/// text); returns the (rule, seq) of each finding, or `None` where the story is the Python
/// grammar's (`after_seq`: where the chain starts, as `check` takes it).
#[pyfunction]
#[pyo3(signature = (events, *, after_seq=0))]
pub(crate) fn grammar_findings(
    events: Vec<Bound<'_, PyTuple>>,
    after_seq: i64,
) -> PyResult<Option<Vec<(&'static str, i64)>>> {
    let mut grammar = Grammar::after(after_seq);
    for event in events {
        if event.len() != 7 {
            return Err(PyTypeError::new_err("an event is a tuple of 7"));
        }
        let kind: String = event.get_item(1)?.extract()?;
        let tool = optional_bytes(&event.get_item(2)?)?;
        let actor = optional_bytes(&event.get_item(3)?)?;
        let payload = optional_bytes(&event.get_item(5)?)?;
        let result = optional_bytes(&event.get_item(6)?)?;
        let attributes = event.get_item(4)?;
        let attributes = attributes.downcast::<PyDict>()?;
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for (k, v) in attributes.iter() {
            pairs.push((
                k.extract::<String>()?.into_bytes(),
                v.extract::<String>()?.into_bytes(),
            ));
        }
        pairs.sort();
        let pairs: Vec<(&[u8], &[u8])> = pairs
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        grammar.feed(&Event {
            seq: event.get_item(0)?.extract()?,
            kind: kind.as_bytes(),
            tool: tool.as_deref(),
            actor: actor.as_deref(),
            attributes: &pairs,
            payload: payload.as_deref(),
            result: result.as_deref(),
        });
    }
    Ok((!grammar.referred).then_some(grammar.findings))
}
