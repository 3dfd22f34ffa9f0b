//! The binary `COPY ... TO STDOUT` stream of archived rows: its header, each row's twelve
//! fields (the columns of `consumers/archive/_rows.py`'s `ROW_COLUMNS`) and its trailer.  A
//! stream that is not one is refused whole, with a [`StreamError`].

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";
const COLUMNS: i16 = 12;

/// Why a stream is not a binary `COPY` of the archive's rows (the whole stream is refused; the
/// binding raises it as `ValueError` with this message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamError(pub(crate) String);

impl From<StreamError> for PyErr {
    fn from(error: StreamError) -> PyErr {
        PyValueError::new_err(error.0)
    }
}

pub(super) fn bad(message: &str) -> StreamError {
    StreamError(format!(
        "not a binary COPY of the archive's rows: {message}"
    ))
}

/// One archived row, its fields borrowed from the stream.
pub(super) struct Row<'a> {
    pub(super) saga: &'a [u8],
    pub(super) seq: i64,
    pub(super) kind: &'a [u8],
    pub(super) texts: [Option<&'a [u8]>; 5],
    pub(super) attributes: &'a [u8],
    pub(super) recorded_at_us: i64,
    pub(super) prev_hash: &'a [u8],
    pub(super) hash: &'a [u8],
}

/// Where each of a row's fields starts and its length (-1: NULL).
pub(super) type Offsets = [(usize, i32); 12];

/// What the stream holds at an index past its header.
pub(super) enum Frame {
    /// Not all of it yet: wait for the next bytes.
    Partial,
    /// The trailer (two bytes).
    Trailer,
    /// A row whose fields are now in the offsets; the next frame starts at this index.
    Row(usize),
}

/// The header's length, or `None` while the stream does not hold all of it yet.
pub(super) fn header(data: &[u8]) -> Result<Option<usize>, StreamError> {
    if data.len() < 19 {
        return Ok(None);
    }
    if &data[..11] != SIGNATURE {
        return Err(bad("the signature is missing"));
    }
    let extension = read_i32(data, 15);
    if extension < 0 {
        return Err(bad("negative header extension"));
    }
    let skip = 19 + extension as usize;
    Ok((data.len() >= skip).then_some(skip))
}

/// The frame at `at`; a row's fields go to `offsets`.
pub(super) fn frame(data: &[u8], at: usize, offsets: &mut Offsets) -> Result<Frame, StreamError> {
    if data.len() < at + 2 {
        return Ok(Frame::Partial);
    }
    let count = read_i16(data, at);
    if count == -1 {
        return Ok(Frame::Trailer);
    }
    if count != COLUMNS {
        return Err(bad(&format!("a row has {count} columns, not {COLUMNS}")));
    }
    let mut p = at + 2;
    for slot in offsets.iter_mut() {
        if data.len() < p + 4 {
            return Ok(Frame::Partial);
        }
        let len = read_i32(data, p);
        p += 4;
        if len < -1 {
            return Err(bad("negative field length"));
        }
        if len >= 0 {
            if data.len() < p + len as usize {
                return Ok(Frame::Partial);
            }
            *slot = (p, len);
            p += len as usize;
        } else {
            *slot = (p, -1);
        }
    }
    Ok(Frame::Row(p))
}

/// The row whose fields `offsets` locates in `data`.
pub(super) fn row<'a>(data: &'a [u8], offsets: &Offsets) -> Result<Row<'a>, StreamError> {
    let get = |i: usize| -> Option<&'a [u8]> {
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
    Ok(Row {
        saga: saga_bytes,
        seq: int(1)?,
        kind: get(2).unwrap_or(b""),
        texts: [get(3), get(4), get(5), get(6), get(7)],
        attributes: get(8).unwrap_or(b"\x00"),
        recorded_at_us: int(9)?,
        prev_hash: get(10).unwrap_or(b""),
        hash: get(11).unwrap_or(b"\x00"),
    })
}

fn read_i16(data: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([data[at], data[at + 1]])
}

fn read_i32(data: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(data[at..at + 4].try_into().expect("4 bytes"))
}
