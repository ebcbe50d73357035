//! Streaming text out of a token stream.
//!
//! [`Detokenizer`] turns token bytes into text as they arrive without ever
//! emitting half of a UTF-8 sequence (a token may end mid-character, as
//! byte-fallback and byte-level tokens do). [`StopMatcher`] holds back text
//! that might be the start of a stop string, so a stop split across tokens
//! is still caught and never shown.

/// Incremental UTF-8 assembly of token bytes.
#[derive(Debug, Default, Clone)]
pub struct Detokenizer {
    pending: Vec<u8>,
}

impl Detokenizer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token's bytes; returns the text that is now complete.
    /// Invalid sequences become U+FFFD; an incomplete tail waits for more.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &after[n..];
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drain = self.pending.len() - keep;
        self.pending.drain(..drain);
        out
    }

    /// Whatever is still held (an unfinished sequence), as lossy text.
    pub fn flush(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

/// Finds stop strings in streamed text.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

/// What [`StopMatcher::push`] lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopOutput {
    /// Text safe to show now.
    pub text: String,
    /// A stop string was found; `text` ends right before it.
    pub stopped: bool,
    /// Which stop string (the one that starts first).
    pub stop: Option<String>,
}

impl StopMatcher {
    /// Empty stop strings are ignored.
    pub fn new(stops: &[String]) -> Self {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> StopOutput {
        self.held.push_str(text);
        if self.stops.is_empty() {
            return StopOutput {
                text: std::mem::take(&mut self.held),
                stopped: false,
                stop: None,
            };
        }
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|i| (i, s)))
            .min_by_key(|&(i, _)| i);
        if let Some((i, s)) = first {
            let stop = Some(s.clone());
            let text = self.held[..i].to_owned();
            self.held.clear();
            return StopOutput {
                text,
                stopped: true,
                stop,
            };
        }
        // Hold back the longest suffix that is a proper prefix of a stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in self.held.char_indices() {
                let suffix = &self.held[i..];
                if suffix.len() < s.len() && s.starts_with(suffix) {
                    keep = keep.max(suffix.len());
                    break;
                }
            }
        }
        let cut = self.held.len() - keep;
        let text = self.held[..cut].to_owned();
        self.held.drain(..cut);
        StopOutput {
            text,
            stopped: false,
            stop: None,
        }
    }

    /// Text held back when generation ends without a stop.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_splits_utf8() {
        let text = "añ€😀z";
        let bytes = text.as_bytes();
        // Feed one byte at a time: every emitted piece is whole characters.
        let mut d = Detokenizer::new();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&d.push(&[*b]));
        }
        out.push_str(&d.flush());
        assert_eq!(out, text);
        let mut d = Detokenizer::new();
        assert_eq!(d.push(&bytes[..2]), "a");
        assert_eq!(d.push(&bytes[2..]), "ñ€😀z");
    }

    #[test]
    fn invalid_bytes_become_replacement() {
        let mut d = Detokenizer::new();
        assert_eq!(d.push(&[b'a', 0xff, b'b']), "a\u{FFFD}b");
        assert_eq!(d.push(&[0xe2, 0x82]), "");
        assert_eq!(d.flush(), "\u{FFFD}");
    }

    #[test]
    fn stop_split_across_pushes() {
        let mut m = StopMatcher::new(&["</end>".to_owned(), "STOP".to_owned()]);
        let mut shown = String::new();
        for piece in ["Hello </", "en", "d> never"] {
            let o = m.push(piece);
            shown.push_str(&o.text);
            if o.stopped {
                break;
            }
        }
        assert_eq!(shown, "Hello ");
    }

    #[test]
    fn false_start_is_released() {
        let mut m = StopMatcher::new(&["STOP".to_owned()]);
        assert_eq!(m.push("a ST").text, "a ");
        assert_eq!(m.push("AR").text, "STAR");
        assert_eq!(m.push("S").text, "");
        assert_eq!(m.finish(), "S");
    }

    #[test]
    fn earliest_stop_wins() {
        let mut m = StopMatcher::new(&["bb".to_owned(), "a".to_owned()]);
        assert_eq!(
            m.push("xbbya"),
            StopOutput {
                text: "x".into(),
                stopped: true,
                stop: Some("bb".into()),
            }
        );
    }
}
