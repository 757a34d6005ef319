//! Request segments.
//!
//! A segment freezes one system prompt (its instruction digest), one
//! deterministically ordered tool catalog, one model and provider, and the
//! seed messages it started from; ordinary turns only append messages to
//! it. Its prefix hash covers the instruction digest, model, provider and
//! seed; its catalog hash covers the tool catalog sorted by name. A new
//! segment starts at a compaction, a reset, a catalog or instruction
//! change, or a model or provider change (routing, failover); then both
//! hashes are recomputed, so they change only at those moments.
//!
//! Hashes are 64-bit FNV-1a in hex: identities for caches and logs, not
//! security.

use crate::provider::{Message, ModelRequest, ToolDefinition};

/// One request segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// `seg_1`, `seg_2`, ...
    pub id: String,
    /// Hash of the immutable prefix: instructions, model, provider, seed.
    pub prefix_hash: String,
    /// Hash of the ordered tool catalog.
    pub catalog_hash: String,
    /// Hash of the system prompt.
    pub instruction_digest: String,
    /// The model the segment calls.
    pub model: String,
    /// The provider label.
    pub provider: String,
    seed_len: usize,
    seed_hash: u64,
}

/// Why a segment started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentStart {
    /// The first request of the thread.
    First,
    /// A compaction rewrote the history.
    Compaction,
    /// A context reset cleared it.
    Reset,
    /// The model or provider changed.
    Model,
    /// The tool catalog changed.
    Catalog,
    /// The system prompt changed.
    Instructions,
    /// The history changed other than by appending.
    Rewrite,
}

/// The segment a thread is in.
#[derive(Debug, Clone, Default)]
pub struct SegmentTracker {
    current: Option<Segment>,
    count: u32,
    starts: Vec<SegmentStart>,
}

struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so ("ab","c") and ("a","bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        self
    }
}

fn hex(h: u64) -> String {
    format!("{h:016x}")
}

/// The hash of a tool catalog, in name order.
pub fn catalog_hash(tools: &[ToolDefinition]) -> String {
    let mut sorted: Vec<&ToolDefinition> = tools.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut h = Fnv::new();
    for t in sorted {
        h.bytes(t.name.as_bytes()).bytes(t.description.as_bytes());
        // The schema's JSON text, hashed as it is written (no String).
        let _ = serde_json::to_writer(&mut h, &t.parameters);
        h.separator();
    }
    hex(h.0)
}

impl Fnv {
    fn separator(&mut self) {
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }
}

impl std::io::Write for Fnv {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &x in buf {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn messages_hash(messages: &[Message]) -> u64 {
    let mut h = Fnv::new();
    for m in messages {
        match m {
            Message::User { content } => h.bytes(b"u").bytes(content.as_bytes()),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                h.bytes(b"a").bytes(content.as_bytes());
                for c in tool_calls {
                    h.bytes(c.id.as_bytes()).bytes(c.arguments.as_bytes());
                }
                &mut h
            }
            Message::ToolResult {
                call_id, content, ..
            } => h
                .bytes(b"t")
                .bytes(call_id.as_bytes())
                .bytes(content.as_bytes()),
        };
    }
    h.0
}

impl SegmentTracker {
    /// The current segment, once a request was seen.
    pub fn current(&self) -> Option<&Segment> {
        self.current.as_ref()
    }

    /// Why each segment so far started, in order.
    pub fn starts(&self) -> &[SegmentStart] {
        &self.starts
    }

    /// Starts a new segment for `request` seeded with its messages;
    /// returns the previous one.
    pub fn start(
        &mut self,
        request: &ModelRequest,
        provider: &str,
        why: SegmentStart,
    ) -> (Option<Segment>, Segment) {
        self.count += 1;
        let instruction_digest = hex(Fnv::new()
            .bytes(request.system.as_deref().unwrap_or("").as_bytes())
            .0);
        let seed_hash = messages_hash(&request.messages);
        let prefix = Fnv::new()
            .bytes(instruction_digest.as_bytes())
            .bytes(request.model.as_bytes())
            .bytes(provider.as_bytes())
            .bytes(&seed_hash.to_le_bytes())
            .0;
        let seg = Segment {
            id: format!("seg_{}", self.count),
            prefix_hash: hex(prefix),
            catalog_hash: catalog_hash(&request.tools),
            instruction_digest,
            model: request.model.clone(),
            provider: provider.to_owned(),
            seed_len: request.messages.len(),
            seed_hash,
        };
        self.starts.push(why);
        let prev = self.current.replace(seg.clone());
        (prev, seg)
    }

    /// Checks a request against the current segment: an ordinary turn only
    /// appends. Starts a new segment (and says why) when the model,
    /// provider, catalog or instructions changed or the seed was rewritten.
    pub fn observe(&mut self, request: &ModelRequest, provider: &str) -> Option<SegmentStart> {
        let why = match &self.current {
            None => SegmentStart::First,
            Some(s) if s.model != request.model || s.provider != provider => SegmentStart::Model,
            Some(s) if s.catalog_hash != catalog_hash(&request.tools) => SegmentStart::Catalog,
            Some(s)
                if s.instruction_digest
                    != hex(Fnv::new()
                        .bytes(request.system.as_deref().unwrap_or("").as_bytes())
                        .0) =>
            {
                SegmentStart::Instructions
            }
            Some(s)
                if request.messages.len() < s.seed_len
                    || messages_hash(&request.messages[..s.seed_len]) != s.seed_hash =>
            {
                SegmentStart::Rewrite
            }
            Some(_) => return None,
        };
        self.start(request, provider, why);
        Some(why)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_catalog_hash_is_the_hash_of_the_schema_text() {
        let t = ToolDefinition {
            name: "add".into(),
            description: "adds — two".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
        };
        let mut h = Fnv::new();
        h.bytes(t.name.as_bytes())
            .bytes(t.description.as_bytes())
            .bytes(t.parameters.to_string().as_bytes());
        assert_eq!(catalog_hash(std::slice::from_ref(&t)), hex(h.0));
    }

    use super::*;

    fn tool(name: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: "d".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    #[test]
    fn ordinary_turns_append_and_changes_start_segments() {
        let mut t = SegmentTracker::default();
        let mut req = ModelRequest::new("m")
            .with_system("sys")
            .with_message(Message::user("task"))
            .with_tool(tool("b"))
            .with_tool(tool("a"));
        assert_eq!(t.observe(&req, "p"), Some(SegmentStart::First));
        let first = t.current().unwrap().clone();
        req.messages.push(Message::assistant("x"));
        assert_eq!(t.observe(&req, "p"), None, "appending keeps the segment");
        // The catalog hash ignores order.
        req.tools.reverse();
        assert_eq!(t.observe(&req, "p"), None);
        req.tools.push(tool("c"));
        assert_eq!(t.observe(&req, "p"), Some(SegmentStart::Catalog));
        assert_ne!(t.current().unwrap().catalog_hash, first.catalog_hash);
        req.model = "m2".into();
        assert_eq!(t.observe(&req, "p"), Some(SegmentStart::Model));
        req.messages[0] = Message::user("rewritten");
        assert_eq!(t.observe(&req, "p"), Some(SegmentStart::Rewrite));
        assert_eq!(t.current().unwrap().id, "seg_4");
        let (prev, new) = t.start(&req, "p", SegmentStart::Compaction);
        assert_eq!(
            prev.unwrap().prefix_hash,
            new.prefix_hash,
            "same seed, same prefix"
        );
    }
}
