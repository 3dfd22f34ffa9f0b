//! A draft's fields, compiled: the text rule (`valid_texts`) and the common draft's checks
//! (`draft_fields`).  `sagacity.entries._events.EntryDraft` asks them first and runs its own
//! checks (the rule's reference, which says what is wrong) only when they decline; the draft
//! writes its own fields either way (nothing here writes a Python object's slots).
//!
//! `valid_texts` accepts exactly what `_check_text` accepts: `None`, or a `str` (a subclass too)
//! with no U+0000 that encodes to UTF-8 (no lone surrogate); tests/core/test_draft_texts.py
//! holds the two to the same verdict on every case of the draft's tests.  `draft_fields` takes
//! the drafts the journal's hot path is made of (form 1, a known event type, text fields, a
//! plain `dict` of text attributes or none, the time given as an int of 64 bits or left to now)
//! and gives the two fields a draft keeps otherwise than given (its attributes frozen, its
//! time); anything else it declines (tests/core/test_draft_checked.py holds the two paths to
//! equal drafts and equal refusals on every case of the draft's tests).

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyInt, PyMapping, PyMappingProxy, PyString, PyTuple, PyType};
use std::time::{SystemTime, UNIX_EPOCH};

fn valid(value: &Bound<'_, PyAny>) -> bool {
    if value.is_none() {
        return true;
    }
    let Ok(text) = value.downcast::<PyString>() else {
        return false;
    };
    // A lone surrogate does not encode: the error is dropped here (the caller's own checks
    // raise the documented one).
    match text.to_str() {
        Ok(s) => !s.as_bytes().contains(&0),
        Err(_) => false,
    }
}

/// Whether every one of `values` is `None` or valid text (no U+0000, encodable as UTF-8).
#[pyfunction]
#[pyo3(signature = (*values))]
pub(crate) fn valid_texts(values: &Bound<'_, PyTuple>) -> bool {
    values.iter().all(|value| valid(&value))
}

/// What `draft_fields` compares with and gives, given once by `sagacity.entries._events`
/// (`draft_shapes`).
struct Shapes {
    /// `EventType`: a draft `draft_fields` takes has one of its members as its type.
    event_type: Py<PyType>,
    /// The frozen empty attributes, commitments and salts, and the "now" default.
    no_attributes: PyObject,
    no_commitments: PyObject,
    now: PyObject,
    /// `SAGA_ID_MAX_BYTES`.
    saga_id_max: usize,
}

static SHAPES: GILOnceCell<Shapes> = GILOnceCell::new();

/// Give `draft_fields` the draft's defaults and types (once; a second call changes nothing).
#[pyfunction]
pub(crate) fn draft_shapes(
    py: Python<'_>,
    event_type: Py<PyType>,
    no_attributes: PyObject,
    no_commitments: PyObject,
    now: PyObject,
    saga_id_max: usize,
) {
    let _ = SHAPES.set(
        py,
        Shapes {
            event_type,
            no_attributes,
            no_commitments,
            now,
            saga_id_max,
        },
    );
}

/// Microseconds since the epoch on the system's clock, as `now_micros` reads it
/// (`time.time_ns() // 1000`, the same wall clock); `None` before 1970.
fn now_micros() -> Option<i64> {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since.as_micros()).ok()
}

/// The attributes `EntryDraft` keeps for `given` (`_freeze`): the frozen empty map for the
/// default or an empty `dict`, else a read-only copy sorted by key; `None` for anything else
/// (not a plain `dict`, a key or value that is not valid text).
fn frozen_attributes<'py>(
    given: &Bound<'py, PyAny>,
    shapes: &Shapes,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = given.py();
    if given.is(&shapes.no_attributes) {
        return Ok(Some(given.clone()));
    }
    if !given.is_exact_instance_of::<PyDict>() {
        return Ok(None);
    }
    let dict = given.downcast::<PyDict>()?;
    if dict.is_empty() {
        return Ok(Some(shapes.no_attributes.bind(py).clone()));
    }
    let mut items: Vec<(Bound<'py, PyString>, Bound<'py, PyString>)> =
        Vec::with_capacity(dict.len());
    for (key, value) in dict.iter() {
        let (Ok(key), Ok(value)) = (
            key.downcast_into::<PyString>(),
            value.downcast_into::<PyString>(),
        ) else {
            return Ok(None);
        };
        if !valid(&key) || !valid(&value) {
            return Ok(None);
        }
        items.push((key, value));
    }
    if items.len() > 1 {
        // Valid text has no surrogate: code-point order (Python's) is UTF-8 byte order.
        items.sort_by(|a, b| {
            let left = a.0.to_str().map(str::as_bytes).unwrap_or_default();
            let right = b.0.to_str().map(str::as_bytes).unwrap_or_default();
            left.cmp(right)
        });
    }
    let copy = PyDict::new(py);
    for (key, value) in &items {
        copy.set_item(key, value)?;
    }
    let mapping = copy.into_any();
    let proxy = PyMappingProxy::new(py, mapping.downcast::<PyMapping>()?);
    Ok(Some(proxy.into_any()))
}

/// Whether `saga_id` is a non-empty valid text of at most `max` bytes of UTF-8.
fn valid_saga_id(saga_id: &Bound<'_, PyAny>, max: usize) -> bool {
    let Ok(text) = saga_id.downcast::<PyString>() else {
        return false;
    };
    match text.to_str() {
        Ok(s) => !s.is_empty() && s.len() <= max && !s.as_bytes().contains(&0),
        Err(_) => false,
    }
}

/// The time a draft keeps: now for the default, else the int given when it is a plain `int`
/// of 64 bits; `None` for anything else.
fn recorded_at<'py>(
    given: &Bound<'py, PyAny>,
    shapes: &Shapes,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if given.is(&shapes.now) {
        return match now_micros() {
            Some(now) => Ok(Some(now.into_pyobject(given.py())?.into_any())),
            None => Ok(None),
        };
    }
    if given.is_exact_instance_of::<PyInt>() && given.extract::<i64>().is_ok() {
        return Ok(Some(given.clone()));
    }
    Ok(None)
}

/// The attributes and the time a draft keeps for these arguments of `EntryDraft(...)`, when
/// they are the common case: `form` the int 1 with the default `commitments` and `salts`,
/// `event_type` an `EventType`, the saga id and the five texts valid text, `attributes` the
/// default or a plain `dict` of texts (kept frozen, sorted by key), `recorded_at_us` the
/// default (now) or a plain int of 64 bits (kept as given).  `None` for anything else: the
/// Python path judges it, and raises what it raises.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn draft_fields<'py>(
    saga_id: &Bound<'py, PyAny>,
    event_type: &Bound<'py, PyAny>,
    tool: &Bound<'py, PyAny>,
    payload: &Bound<'py, PyAny>,
    result: &Bound<'py, PyAny>,
    error: &Bound<'py, PyAny>,
    actor: &Bound<'py, PyAny>,
    attributes: &Bound<'py, PyAny>,
    recorded_at_us: &Bound<'py, PyAny>,
    form: &Bound<'py, PyAny>,
    commitments: &Bound<'py, PyAny>,
    salts: &Bound<'py, PyAny>,
) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    let py = saga_id.py();
    let Some(shapes) = SHAPES.get(py) else {
        return Ok(None);
    };
    let common = form.is_exact_instance_of::<PyInt>()
        && form.extract::<i64>().ok() == Some(1)
        && commitments.is(&shapes.no_commitments)
        && salts.is(&shapes.no_commitments)
        && event_type.get_type().is(shapes.event_type.bind(py))
        && valid_saga_id(saga_id, shapes.saga_id_max)
        && [tool, payload, result, error, actor]
            .iter()
            .all(|t| valid(t));
    if !common {
        return Ok(None);
    }
    let Some(attributes) = frozen_attributes(attributes, shapes)? else {
        return Ok(None);
    };
    let Some(recorded) = recorded_at(recorded_at_us, shapes)? else {
        return Ok(None);
    };
    Ok(Some((attributes, recorded)))
}
