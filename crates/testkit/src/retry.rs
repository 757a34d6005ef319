//! Retries and bounds: what a retried request gets, and how much a
//! request may cost the server.
//!
//! troupe marks a retried model request with the [`RETRY_HEADER`] header
//! (the attempt number, 1 for the first retry). The server remembers, per
//! cursor, which reply it gave to each recent request body; a request that
//! carries the header and repeats one of those bodies is a retry of it and
//! gets that reply again, without the fault that made the first attempt
//! fail ([`settled`]), instead of the next reply. A fault with nothing to
//! wrap (`http_error`, a `stall` without `then`) is spent by the attempt it
//! failed, so its retry takes the next reply as before.

use std::collections::VecDeque;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::script::{MessageReply, Reply, default_malformed_message};

/// The request header troupe sets on a retried model request.
pub const RETRY_HEADER: &str = "x-troupe-retry";

/// How many recent request bodies each cursor remembers for retries.
const REMEMBERED: usize = 16;

/// A request body, remembered by hash and length (not by copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyKey {
    hash: u64,
    len: usize,
}

impl BodyKey {
    pub(crate) fn of(body: &[u8]) -> BodyKey {
        let mut h = DefaultHasher::new();
        body.hash(&mut h);
        BodyKey {
            hash: h.finish(),
            len: body.len(),
        }
    }
}

/// The replies recently given on one cursor, by request body: positions
/// in the cursor's reply list, not copies.
#[derive(Debug, Default)]
pub(crate) struct Served {
    recent: VecDeque<(BodyKey, usize)>,
}

impl Served {
    /// Remembers that `key` got the reply at `position`.
    pub(crate) fn remember(&mut self, key: BodyKey, position: usize) {
        if self.recent.len() == REMEMBERED {
            self.recent.pop_front();
        }
        self.recent.push_back((key, position));
    }

    /// The reply a retry of `key` gets, if `key` was answered from
    /// `replies` by a reply that has something to replay.
    pub(crate) fn replay(&self, key: BodyKey, replies: &[Reply]) -> Option<Reply> {
        let (_, position) = self.recent.iter().rev().find(|(k, _)| *k == key)?;
        settled(replies.get(*position)?)
    }
}

/// `reply` without its fault: a stall's `then`, a cut's reply, a malformed
/// stream's message, a message without its `delay_ms`. `None` for a fault
/// that wraps no answer (`http_error`, a `stall` without `then`).
pub(crate) fn settled(reply: &Reply) -> Option<Reply> {
    match reply {
        Reply::Message(m) => Some(Reply::Message(MessageReply {
            delay_ms: None,
            ..m.clone()
        })),
        Reply::Empty { .. } => Some(reply.clone()),
        Reply::Stall { then, .. } => then.as_deref().and_then(settled),
        Reply::Cut { reply, .. } => settled(reply),
        Reply::Malformed { message } => Some(Reply::Message(MessageReply {
            delay_ms: None,
            ..message.clone().unwrap_or_else(default_malformed_message)
        })),
        Reply::HttpError { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_settle_to_what_they_wrap() {
        let text = Reply::text("hi");
        assert_eq!(
            settled(&Reply::stall_then(5, text.clone())),
            Some(text.clone())
        );
        assert_eq!(
            settled(&Reply::cut_after_bytes(text.clone(), 3)),
            Some(text.clone())
        );
        assert_eq!(settled(&text.clone().with_delay_ms(9)), Some(text));
        assert_eq!(settled(&Reply::stall_ms(5)), None);
        assert_eq!(settled(&Reply::http_error(503, "x")), None);
    }

    #[test]
    fn remembers_a_bounded_number_of_bodies() {
        let replies = vec![Reply::text("r")];
        let mut s = Served::default();
        for i in 0..(REMEMBERED + 4) {
            s.remember(BodyKey::of(i.to_string().as_bytes()), 0);
        }
        assert_eq!(s.recent.len(), REMEMBERED);
        assert!(s.replay(BodyKey::of(b"0"), &replies).is_none());
        assert!(s.replay(BodyKey::of(b"19"), &replies).is_some());
    }
}
