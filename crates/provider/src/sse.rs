//! An incremental Server-Sent Events decoder: bytes in, events out.
//!
//! It follows the WHATWG event-stream rules, leniently:
//! - lines end in LF, CRLF or CR, and a CRLF may be split across chunks;
//! - a chunk may end anywhere, also inside a multi-byte UTF-8 character
//!   (a line is decoded only once it is complete);
//! - `:` lines are comments (keep-alives); unknown fields are ignored;
//! - the `data` lines of one event are joined with LF, and one space after
//!   the colon is dropped;
//! - an event is dispatched at a blank line; an event still open when the
//!   input ends is dispatched by [`SseDecoder::finish`] (a strict parser
//!   would drop it; some servers end with `data: [DONE]\n`).

/// One dispatched SSE event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when sent.
    pub event: Option<String>,
    /// The `data:` lines, joined with LF.
    pub data: String,
    /// The last `id:` field seen, when sent.
    pub id: Option<String>,
}

/// The incremental decoder. Feed it chunks as they arrive.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of a line whose terminator has not arrived yet.
    partial: Vec<u8>,
    /// The last chunk ended in CR: an LF at the start of the next chunk
    /// belongs to that CRLF and is not a second (blank) line.
    after_cr: bool,
    /// False until the first byte is processed: a UTF-8 BOM there is skipped.
    started: bool,
    /// The event being built.
    event: Option<String>,
    data: String,
    has_data: bool,
    last_id: Option<String>,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes `chunk`, appending every completed event to `out`. An empty
    /// chunk changes nothing (it used to forget a CR that ended the chunk
    /// before, so the LF of that CRLF became a blank line).
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        if chunk.is_empty() {
            return;
        }
        let mut rest = chunk;
        if !self.started {
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            self.partial.extend_from_slice(rest);
            if self.partial.len() < BOM.len() && BOM.starts_with(&self.partial) {
                // Could still be a BOM split across chunks: wait for more.
                return;
            }
            self.started = true;
            let head = std::mem::take(&mut self.partial);
            self.feed_lines(head.strip_prefix(BOM).unwrap_or(&head), out);
            return;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(stripped) = rest.strip_prefix(b"\n") {
                rest = stripped;
            }
        }
        self.feed_lines(rest, out);
    }

    fn feed_lines(&mut self, mut rest: &[u8], out: &mut Vec<SseEvent>) {
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            let line = &rest[..pos];
            let terminator = rest[pos];
            rest = &rest[pos + 1..];
            if terminator == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            if self.partial.is_empty() {
                self.line(line, out);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.line(&whole, out);
            }
        }
        self.partial.extend_from_slice(rest);
    }

    /// Ends the stream: a last unterminated line is processed and an event
    /// still open is dispatched.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, out);
        }
        self.dispatch(out);
        self.after_cr = false;
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                self.data.push_str(&String::from_utf8_lossy(value));
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" if !value.contains(&0) => {
                self.last_id = Some(String::from_utf8_lossy(value).into_owned());
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        out.push(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8], split: usize) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for chunk in input.chunks(split.max(1)) {
            d.feed(chunk, &mut out);
        }
        d.finish(&mut out);
        out
    }

    #[test]
    fn line_endings_comments_and_multiline_data() {
        let input = b"\xEF\xBB\xBF: keep-alive\r\nevent: a\r\ndata: one\rdata:two\n\ndata: x\r\n\r\nid: 7\ndata: {}\n";
        for split in 1..input.len() {
            let evs = decode_all(input, split);
            assert_eq!(evs.len(), 3, "split {split}");
            assert_eq!(evs[0].event.as_deref(), Some("a"));
            assert_eq!(evs[0].data, "one\ntwo");
            assert_eq!(evs[1].event, None);
            assert_eq!(evs[1].data, "x");
            assert_eq!(evs[2].data, "{}");
            assert_eq!(evs[2].id.as_deref(), Some("7"));
        }
    }

    #[test]
    fn cr_only_and_split_utf8() {
        let input = "data: h\u{e9}llo \u{1F600}\r\rdata: b\r\r".as_bytes();
        for split in 1..input.len() {
            let evs = decode_all(input, split);
            assert_eq!(evs.len(), 2);
            assert_eq!(evs[0].data, "h\u{e9}llo \u{1F600}");
            assert_eq!(evs[1].data, "b");
        }
    }

    #[test]
    fn an_empty_chunk_between_cr_and_lf_is_no_blank_line() {
        let input: &[&[u8]] = &[
            b"event: a\r",
            b"",
            b"\ndata: one\r",
            b"",
            b"\ndata: two\r\n\r\n",
        ];
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for chunk in input {
            d.feed(chunk, &mut out);
        }
        d.finish(&mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].event.as_deref(), Some("a"));
        assert_eq!(out[0].data, "one\ntwo");
    }

    #[test]
    fn blank_lines_without_data_dispatch_nothing() {
        let evs = decode_all(b"event: ping\n\n\n\n: c\n\n", 4);
        assert!(evs.is_empty());
    }
}
