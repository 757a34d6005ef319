//! Server-sent events as `troupe serve` streams them: [`Splitter`] cuts
//! the bytes of a stream, as they come, into [`Block`]s (each ended by a
//! blank line), whatever reads them (reqwest, a raw socket).

/// One block of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Its `id:` (none: a heartbeat comment).
    pub id: Option<u64>,
    /// Its `event:` (empty when it has none).
    pub event: String,
    /// Its `data:` lines, joined.
    pub data: String,
    /// Its bytes, the blank line included.
    pub raw: Vec<u8>,
}

impl Block {
    /// Reads one block's bytes. Panics on an `id:` that is not a number.
    pub fn parse(raw: Vec<u8>) -> Block {
        let text = String::from_utf8_lossy(&raw);
        let (mut id, mut event, mut data) = (None, String::new(), String::new());
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(
                    v.parse()
                        .unwrap_or_else(|e| panic!("a bad event id {v:?}: {e}")),
                );
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = v.to_string();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push_str(v);
            }
        }
        Block {
            id,
            event,
            data,
            raw,
        }
    }

    /// Its bytes as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }
}

/// Cuts a stream's bytes into blocks as they come.
#[derive(Debug, Default)]
pub struct Splitter {
    pending: Vec<u8>,
}

impl Splitter {
    /// A splitter that has already read `bytes` (say, what came after a
    /// response head).
    pub fn with_pending(bytes: Vec<u8>) -> Splitter {
        Splitter { pending: bytes }
    }

    /// Takes in `bytes`; the blocks they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Block> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(at) = find(&self.pending, b"\n\n") {
            out.push(Block::parse(self.pending.drain(..at + 2).collect()));
        }
        out
    }
}

/// Where `needle` first stands in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cut_anywhere_are_read_whole() {
        let stream = b": hb\n\nid: 7\nevent: item.started\ndata: {\"a\":\ndata: 1}\n\nid: 8\n";
        let mut s = Splitter::default();
        let mut blocks = s.push(&stream[..10]);
        blocks.extend(s.push(&stream[10..]));
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].id, None);
        assert_eq!(blocks[1].id, Some(7));
        assert_eq!(blocks[1].event, "item.started");
        assert_eq!(blocks[1].data, "{\"a\":1}");
        assert!(blocks[1].text().ends_with("1}\n\n"));
        assert_eq!(s.push(b"\n")[0].id, Some(8));
    }
}
