//! The text rule of a draft's fields, compiled: `sagacity.entries._events.EntryDraft` asks it
//! first and runs its own checks (the rule's reference, which says what is wrong) only when it
//! declines.  It accepts exactly what `_check_text` accepts: `None`, or a `str` (a subclass too)
//! with no U+0000 that encodes to UTF-8 (no lone surrogate); tests/core/test_draft_texts.py
//! holds the two to the same verdict on every case of the draft's tests.

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

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
