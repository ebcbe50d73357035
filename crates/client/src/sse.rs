//! An incremental Server-Sent Events parser (the WHATWG event-stream
//! grammar): bytes go in as they arrive, whole events and comments come out.
//! Lines may end in `\n`, `\r\n` or `\r`, and may be split anywhere across
//! network chunks. Each item remembers when its first byte arrived, which is
//! what TTFT and ITL are measured against.

use tokio::time::Instant;

#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A line starting with `:` (keep-alives, hasten's queue and prefill notes).
    Comment { text: String, at: Instant },
    /// A dispatched event (a blank line ended it).
    Event {
        id: Option<String>,
        event: Option<String>,
        data: String,
        at: Instant,
    },
}

#[derive(Debug, Default)]
pub struct Parser {
    /// Bytes of an unfinished line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`; a leading `\n` belongs to it.
    after_cr: bool,
    data: Option<String>,
    id: Option<String>,
    event: Option<String>,
    /// When the pending event's first line began.
    started: Option<Instant>,
    /// When the current line's first byte arrived.
    line_at: Option<Instant>,
}

impl Parser {
    pub fn new() -> Self {
        Parser::default()
    }

    /// Feeds bytes that arrived at `at`, appending complete items to `out`.
    pub fn feed(&mut self, bytes: &[u8], at: Instant, out: &mut Vec<Item>) {
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    let line_at = self.line_at.take().unwrap_or(at);
                    self.line_done(&line, line_at, out);
                }
                _ => {
                    if self.line.is_empty() {
                        self.line_at = Some(at);
                    }
                    self.line.push(b);
                }
            }
        }
    }

    /// True when bytes of an unfinished event are buffered (a body that ends
    /// now was cut short).
    pub fn mid_event(&self) -> bool {
        !self.line.is_empty() || self.data.is_some() || self.id.is_some()
    }

    fn line_done(&mut self, line: &[u8], at: Instant, out: &mut Vec<Item>) {
        let line = String::from_utf8_lossy(line);
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(Item::Event {
                    id: self.id.take(),
                    event: self.event.take(),
                    data,
                    at: self.started.take().unwrap_or(at),
                });
            }
            self.id = None;
            self.event = None;
            self.started = None;
            return;
        }
        if let Some(text) = line.strip_prefix(':') {
            out.push(Item::Comment {
                text: text.strip_prefix(' ').unwrap_or(text).to_string(),
                at,
            });
            return;
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&line[..], ""),
        };
        if self.started.is_none() {
            self.started = Some(at);
        }
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            "event" => self.event = Some(value.to_string()),
            // `retry:` and unknown fields are ignored, as the spec says.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(text: &str, piece: usize) -> Vec<(Option<String>, String)> {
        let mut p = Parser::new();
        let mut out = Vec::new();
        let now = Instant::now();
        for c in text.as_bytes().chunks(piece) {
            p.feed(c, now, &mut out);
        }
        out.into_iter()
            .filter_map(|i| match i {
                Item::Event { id, data, .. } => Some((id, data)),
                Item::Comment { .. } => None,
            })
            .collect()
    }

    #[test]
    fn events_survive_any_split_and_line_ending() {
        let text = ": hi\n\nid: 3\ndata: {\"a\":1}\n\ndata:x\ndata: y\r\n\r\nid:4\rdata: z\r\r";
        let want = vec![
            (Some("3".to_string()), "{\"a\":1}".to_string()),
            (None, "x\ny".to_string()),
            (Some("4".to_string()), "z".to_string()),
        ];
        for piece in 1..text.len() {
            assert_eq!(parse_in_pieces(text, piece), want, "piece {piece}");
        }
    }

    #[test]
    fn comments_come_out_and_cut_events_are_noticed() {
        let mut p = Parser::new();
        let mut out = Vec::new();
        p.feed(b": keep-alive\n\ndata: {\"x\"", Instant::now(), &mut out);
        assert!(matches!(&out[0], Item::Comment { text, .. } if text == "keep-alive"));
        assert_eq!(out.len(), 1);
        assert!(p.mid_event());
        p.feed(b"}\n\n", Instant::now(), &mut out);
        assert!(!p.mid_event());
        assert_eq!(out.len(), 2);
    }
}
