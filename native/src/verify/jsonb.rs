//! The attributes column as the archive returns it: jsonb's text form of a flat object of
//! strings, read into the sorted pairs the canonical form takes.

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

pub(super) type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The attribute pairs of a flat JSON object of strings (jsonb's text form), sorted by key as
/// the canonical form takes them, or `None` for anything else (another value type, a duplicate
/// key, invalid text).
pub(super) fn attribute_pairs(data: &[u8]) -> Option<Pairs> {
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
