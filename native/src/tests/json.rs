//! A JSON reader and writer for the shared vectors (`tests/vectors/*.json`); the crate takes
//! no JSON dependency for its tests.  Strings keep what Rust cannot hold: a lone surrogate
//! (which the vectors use on purpose) is a [`Json::BadStr`] of its UTF-16 code units.

use std::fmt::Write;
use std::path::Path;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// An integer (the vectors hold some beyond 64 bits on purpose).
    Int(i128),
    /// Any other number, as written (a float).
    Number(String),
    Str(String),
    /// A string holding a lone surrogate: its UTF-16 code units.
    BadStr(Vec<u16>),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The member `key` of an object (`Null` when absent or not an object).
    pub(crate) fn get(&self, key: &str) -> &Json {
        match self {
            Json::Object(members) => members
                .iter()
                .find(|(k, _)| k == key)
                .map_or(&Json::Null, |(_, v)| v),
            _ => &Json::Null,
        }
    }

    pub(crate) fn items(&self) -> &[Json] {
        match self {
            Json::Array(items) => items,
            other => panic!("not an array: {other:?}"),
        }
    }

    pub(crate) fn members(&self) -> &[(String, Json)] {
        match self {
            Json::Object(members) => members,
            other => panic!("not an object: {other:?}"),
        }
    }

    pub(crate) fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    pub(crate) fn int(&self) -> i128 {
        match self {
            Json::Int(n) => *n,
            other => panic!("not an integer: {other:?}"),
        }
    }

    /// A 64-bit integer, if this is one.
    pub(crate) fn i64(&self) -> Option<i64> {
        match self {
            Json::Int(n) => i64::try_from(*n).ok(),
            _ => None,
        }
    }
}

/// The vector file `name` of `tests/vectors/`, read from the crate's directory.
pub(crate) fn vectors(name: &str) -> Json {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("tests")
        .join("vectors")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the vectors are read from {}: {e}", path.display()));
    parse(&text)
}

pub(crate) fn parse(text: &str) -> Json {
    let mut reader = Reader {
        data: text.as_bytes(),
        at: 0,
    };
    let value = reader.value();
    reader.skip_ws();
    assert_eq!(reader.at, reader.data.len(), "text after the JSON value");
    value
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn skip_ws(&mut self) {
        while self.at < self.data.len() && b" \t\r\n".contains(&self.data[self.at]) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> u8 {
        self.skip_ws();
        *self.data.get(self.at).expect("the JSON ends early")
    }

    fn expect(&mut self, literal: &str) {
        assert!(
            self.data[self.at..].starts_with(literal.as_bytes()),
            "expected {literal} at byte {}",
            self.at
        );
        self.at += literal.len();
    }

    fn value(&mut self) -> Json {
        match self.peek() {
            b'n' => {
                self.expect("null");
                Json::Null
            }
            b't' => {
                self.expect("true");
                Json::Bool(true)
            }
            b'f' => {
                self.expect("false");
                Json::Bool(false)
            }
            b'"' => match self.string() {
                Ok(s) => Json::Str(s),
                Err(units) => Json::BadStr(units),
            },
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if self.peek() == b']' {
                    self.at += 1;
                    return Json::Array(items);
                }
                loop {
                    items.push(self.value());
                    match self.peek() {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Json::Array(items);
                        }
                        other => panic!("unexpected {:?} in an array", other as char),
                    }
                }
            }
            b'{' => {
                self.at += 1;
                let mut members = Vec::new();
                if self.peek() == b'}' {
                    self.at += 1;
                    return Json::Object(members);
                }
                loop {
                    assert_eq!(self.peek(), b'"', "an object's key is a string");
                    let key = self.string().expect("keys are valid text");
                    assert_eq!(self.peek(), b':', "a key is followed by ':'");
                    self.at += 1;
                    members.push((key, self.value()));
                    match self.peek() {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            return Json::Object(members);
                        }
                        other => panic!("unexpected {:?} in an object", other as char),
                    }
                }
            }
            _ => self.number(),
        }
    }

    fn number(&mut self) -> Json {
        let start = self.at;
        while self.at < self.data.len() && b"+-0123456789.eE".contains(&self.data[self.at]) {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.data[start..self.at]).expect("ASCII");
        assert!(!text.is_empty(), "a value was expected at byte {start}");
        match text.parse::<i128>() {
            Ok(n) => Json::Int(n),
            Err(_) => Json::Number(text.to_string()),
        }
    }

    /// A string from its opening quote: the text, or its UTF-16 units when it is not text.
    fn string(&mut self) -> Result<String, Vec<u16>> {
        self.at += 1;
        let mut units: Vec<u16> = Vec::new();
        loop {
            let rest = std::str::from_utf8(&self.data[self.at..]).expect("the file is UTF-8");
            let c = rest.chars().next().expect("a string ends with a quote");
            self.at += c.len_utf8();
            match c {
                '"' => return String::from_utf16(&units).map_err(|_| units),
                '\\' => {
                    let escape = self.data[self.at];
                    self.at += 1;
                    let unit = match escape {
                        b'"' => 0x22,
                        b'\\' => 0x5c,
                        b'/' => 0x2f,
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => 0x0a,
                        b'r' => 0x0d,
                        b't' => 0x09,
                        b'u' => {
                            let hex = std::str::from_utf8(&self.data[self.at..self.at + 4])
                                .expect("four hex digits");
                            self.at += 4;
                            u16::from_str_radix(hex, 16).expect("four hex digits")
                        }
                        other => panic!("unknown escape \\{}", other as char),
                    };
                    units.push(unit);
                }
                c => {
                    let mut buf = [0u16; 2];
                    units.extend_from_slice(c.encode_utf16(&mut buf));
                }
            }
        }
    }
}

/// `text` as a JSON string the way Python's `json.dumps` writes it (ASCII only, other
/// characters as `\uXXXX`, surrogate pairs beyond the first plane).
pub(crate) fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if c.is_ascii() && c >= ' ' => out.push(c),
            c => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    write!(out, "\\u{unit:04x}").expect("a String takes writes");
                }
            }
        }
    }
    out.push('"');
    out
}

#[test]
fn the_reader_keeps_what_rust_cannot_hold() {
    let value =
        parse(r#"{"a": ["x\u00e9\ud834\udd1e", "\ud800", 18446744073709551616, 1.5, null, true]}"#);
    let items = value.get("a").items();
    assert_eq!(items[0], Json::Str("xé𝄞".to_string()));
    assert_eq!(items[1], Json::BadStr(vec![0xd800]));
    assert_eq!(items[2], Json::Int(1 << 64));
    assert_eq!(items[3], Json::Number("1.5".to_string()));
    assert_eq!(items[4], Json::Null);
    assert_eq!(items[5], Json::Bool(true));
    assert_eq!(quote("é\"\u{1}𝄞"), r#""\u00e9\"\u0001\ud834\udd1e""#);
}
