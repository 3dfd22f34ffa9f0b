//! The attributes the grammar reads as numbers (a request's seq, a grant's, the signatures a
//! request needs), read as the core reads them, and [`Refer`]: what this twin leaves to the
//! Python grammar.

use super::events::Event;

pub(super) const INT64_MAX: i128 = i64::MAX as i128;
const SIGNATURES_MAX: i128 = i32::MAX as i128;
const STRICTEST_SIGNATURES: i128 = 2;

/// Not modelled here: the saga's story goes to the Python grammar.
pub(super) struct Refer;

/// `sagacity.entries._bounds.parse_int`: the integer an attribute holds, saturated to
/// `[low, high]`; `Ok(None)` when absent or not a decimal integer; `Err(Refer)` for text
/// outside ASCII (whose whitespace Python's `str.strip` may read otherwise).
pub(super) fn parse_int(raw: Option<&[u8]>, low: i128, high: i128) -> Result<Option<i128>, Refer> {
    let Some(raw) = raw else { return Ok(None) };
    if !raw.is_ascii() {
        return Err(Refer);
    }
    // str.strip()'s whitespace, within ASCII.
    let space = |b: &u8| matches!(b, b'\t'..=b'\r' | 0x1c..=0x1f | b' ');
    let start = raw.iter().position(|b| !space(b)).unwrap_or(raw.len());
    let end = raw.iter().rposition(|b| !space(b)).map_or(start, |i| i + 1);
    let text = &raw[start..end];
    let negative = text.first() == Some(&b'-');
    let digits = if matches!(text.first(), Some(b'+' | b'-')) {
        &text[1..]
    } else {
        text
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Ok(None);
    }
    if digits.len() > 20 {
        return Ok(Some(if negative { low } else { high }));
    }
    let magnitude = digits
        .iter()
        .fold(0i128, |acc, d| acc * 10 + i128::from(d - b'0'));
    let value = if negative { -magnitude } else { magnitude };
    Ok(Some(value.clamp(low, high)))
}

/// `sagacity.gate._requests.ref_of`.
pub(super) fn ref_of(event: &Event) -> Result<Option<i64>, Refer> {
    let found = parse_int(event.get("ref_seq"), 0, INT64_MAX)?;
    Ok(found.filter(|r| *r >= 1).map(|r| r as i64))
}

/// `_grammar.required_signatures`.
pub(super) fn required_signatures(event: &Event) -> Result<i128, Refer> {
    let declared = match event.get("reversibility") {
        Some(b"IRREVERSIBLE") => 1,
        Some(b"PRIVILEGED") => 2,
        _ => 0,
    };
    let claimed = parse_int(event.get("signatures_required"), 0, SIGNATURES_MAX)?;
    let journaled = match claimed {
        Some(c) if c >= 1 => c,
        _ => STRICTEST_SIGNATURES,
    };
    Ok(declared.max(journaled))
}
