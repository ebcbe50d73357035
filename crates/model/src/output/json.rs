//! Scanning JSON that is still arriving: where a value ends, or that it
//! has not ended yet, and a tool call's fields read from an object that
//! may be cut off anywhere.

/// How far one JSON value reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// A whole, valid value ends at this byte offset.
    Done(usize),
    /// The text ends inside the value.
    More,
    /// Not JSON.
    Bad,
}

/// Skips JSON whitespace from `i`.
pub fn skip_ws(s: &str, mut i: usize) -> usize {
    let b = s.as_bytes();
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// The end of the string literal that opens at `i` (`s[i] == '"'`).
fn scan_string(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// Scans the value that starts at `i` (after whitespace).
pub fn scan_value(s: &str, i: usize) -> Scan {
    let b = s.as_bytes();
    let i = skip_ws(s, i);
    let Some(&first) = b.get(i) else {
        return Scan::More;
    };
    let end = match first {
        b'"' => match scan_string(b, i) {
            Some(e) => e,
            None => return Scan::More,
        },
        b'{' | b'[' => {
            let mut stack = Vec::new();
            let mut j = i;
            loop {
                let Some(&c) = b.get(j) else {
                    return Scan::More;
                };
                match c {
                    b'"' => match scan_string(b, j) {
                        Some(e) => {
                            j = e;
                            continue;
                        }
                        None => return Scan::More,
                    },
                    b'{' | b'[' => stack.push(c),
                    b'}' | b']' => {
                        let open = if c == b'}' { b'{' } else { b'[' };
                        if stack.pop() != Some(open) {
                            return Scan::Bad;
                        }
                        if stack.is_empty() {
                            break j + 1;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        c if c == b'-' || c.is_ascii_alphanumeric() => {
            let mut j = i;
            while j < b.len()
                && (b[j].is_ascii_alphanumeric() || matches!(b[j], b'+' | b'-' | b'.'))
            {
                j += 1;
            }
            if j == b.len() {
                // A number or literal may go on.
                return if serde_json::from_str::<serde_json::Value>(&s[i..j]).is_ok()
                    || is_literal_prefix(&s[i..j])
                {
                    Scan::More
                } else {
                    Scan::Bad
                };
            }
            j
        }
        _ => return Scan::Bad,
    };
    match serde_json::from_str::<serde::de::IgnoredAny>(&s[i..end]) {
        Ok(_) => Scan::Done(end),
        Err(_) => Scan::Bad,
    }
}

fn is_literal_prefix(t: &str) -> bool {
    ["true", "false", "null"].iter().any(|l| l.starts_with(t)) || t == "-"
}

/// A tool call read so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Draft {
    pub name: Option<String>,
    /// The arguments' JSON text as the model wrote it (the decoded text
    /// when the model wrote them as a JSON string); a prefix of it while
    /// the call is cut off.
    pub args: String,
    /// `id` when the model wrote one (Mistral).
    pub id: Option<String>,
}

/// A call object read from text that may end anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallScan {
    /// Whole, ending at this offset.
    Done(Draft, usize),
    /// Cut off; what was read.
    More(Draft),
    /// Not a call object.
    Bad,
}

/// Reads `{"name": …, "<args key>": …}` (any key order; other keys such as
/// `type` and `id` are allowed; OpenAI's nested `{"function": {…}}` too)
/// starting at `i`.
pub fn scan_call(s: &str, i: usize, args_keys: &[&str]) -> CallScan {
    let b = s.as_bytes();
    let mut d = Draft::default();
    let mut i = skip_ws(s, i);
    match b.get(i) {
        None => return CallScan::More(d),
        Some(b'{') => i += 1,
        Some(_) => return CallScan::Bad,
    }
    let mut first = true;
    loop {
        i = skip_ws(s, i);
        match b.get(i) {
            None => return CallScan::More(d),
            Some(b'}') => {
                if d.args.is_empty() {
                    d.args = "{}".into();
                }
                return CallScan::Done(d, i + 1);
            }
            Some(b',') if !first => i = skip_ws(s, i + 1),
            Some(_) if first => {}
            Some(_) => return CallScan::Bad,
        }
        first = false;
        let key_end = match scan_value(s, i) {
            Scan::Done(e) if b[skip_ws(s, i)] == b'"' => e,
            Scan::More => return CallScan::More(d),
            _ => return CallScan::Bad,
        };
        let key: String = match serde_json::from_str(&s[i..key_end]) {
            Ok(k) => k,
            Err(_) => return CallScan::Bad,
        };
        i = skip_ws(s, key_end);
        match b.get(i) {
            None => return CallScan::More(d),
            Some(b':') => i = skip_ws(s, i + 1),
            Some(_) => return CallScan::Bad,
        }
        if i >= b.len() {
            return CallScan::More(d);
        }
        if key == "function" && b[i] == b'{' {
            match scan_call(s, i, args_keys) {
                CallScan::Done(inner, e) => {
                    d.name = inner.name.or(d.name);
                    d.args = inner.args;
                    i = e;
                    continue;
                }
                CallScan::More(inner) => {
                    d.name = inner.name.or(d.name);
                    d.args = inner.args;
                    return CallScan::More(d);
                }
                CallScan::Bad => return CallScan::Bad,
            }
        }
        let end = match scan_value(s, i) {
            Scan::Done(e) => e,
            Scan::Bad => return CallScan::Bad,
            Scan::More => {
                if args_keys.contains(&key.as_str()) && matches!(b[i], b'{' | b'[') {
                    d.args = s[i..].to_owned();
                }
                return CallScan::More(d);
            }
        };
        let raw = &s[i..end];
        if key == "name" || key == "id" {
            let Ok(v) = serde_json::from_str::<String>(raw) else {
                return CallScan::Bad;
            };
            if key == "name" {
                d.name = Some(v);
            } else {
                d.id = Some(v);
            }
        } else if args_keys.contains(&key.as_str()) {
            d.args = if raw.starts_with('"') {
                serde_json::from_str::<String>(raw).unwrap_or_default()
            } else {
                raw.to_owned()
            };
        }
        i = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_end_where_json_says() {
        assert_eq!(scan_value(r#" {"a": [1, "}"]} x"#, 0), Scan::Done(16));
        assert_eq!(scan_value(r#"{"a": [1, "}"#, 0), Scan::More);
        assert_eq!(scan_value(r#"{"a": ]"#, 0), Scan::Bad);
        assert_eq!(scan_value("12", 0), Scan::More);
        assert_eq!(scan_value("12,", 0), Scan::Done(2));
        assert_eq!(scan_value("tr", 0), Scan::More);
        assert_eq!(scan_value("tx,", 0), Scan::Bad);
        assert_eq!(scan_value(r#""a\"b" "#, 0), Scan::Done(6));
    }

    #[test]
    fn a_call_is_read_from_every_prefix() {
        let text = r#"{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}} tail"#;
        let whole = r#"{"city": "Paris", "unit": "c"}"#;
        for cut in 0..text.len() {
            match scan_call(&text[..cut], 0, &["arguments"]) {
                CallScan::More(d) => {
                    assert!(whole.starts_with(&d.args), "{cut}: {d:?}");
                    if cut > 22 {
                        assert_eq!(d.name.as_deref(), Some("get_weather"));
                    }
                }
                CallScan::Done(d, e) => {
                    assert_eq!(e, 68);
                    assert_eq!(d.args, whole);
                }
                CallScan::Bad => panic!("{cut}"),
            }
        }
        let nested =
            r#"{"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}"#;
        match scan_call(nested, 0, &["arguments"]) {
            CallScan::Done(d, _) => {
                assert_eq!(d.name.as_deref(), Some("f"));
                assert_eq!(d.args, r#"{"x": 1}"#);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            scan_call(r#"{"name": 3}"#, 0, &["arguments"]),
            CallScan::Bad
        );
        assert_eq!(scan_call("hello", 0, &["arguments"]), CallScan::Bad);
    }
}
