//! The four stream parsers: arbitrary bytes as a response body.
//!
//! Input layout: byte 0 says how many control bytes follow (`% 8`); the
//! control bytes are the chunk lengths, cycled (0 is an empty chunk); the
//! rest is the body. The body goes through [`StreamParser`] (SSE framing +
//! the format decoder) exactly as `ProviderClient` feeds it (stop at the
//! first error or at the stream's end, `finish` at the end of the body)
//! and the events are folded into a [`ModelResponse`].
//!
//! Checked, besides "no panic, no hang":
//! - chunking does not matter: the body fed whole and fed in the chosen
//!   chunks gives the same SSE events (names and ids included) and the
//!   same model events and first error;
//! - the events a client sees follow the provider tests' event grammar
//!   (`check_grammar`: one start per call, deltas and the end only after
//!   the start, one end, one `Usage`, `Finish` last), and every call ended
//!   when the stream ended without an error.

use std::collections::BTreeMap;

use troupe_provider::{
    ModelEvent, ModelResponse, SseDecoder, SseEvent, StreamDecoder, StreamParser,
};

/// Seed of the id generator, so two runs name generated call ids alike.
const ID_SEED: u64 = 0x5eed;

/// Runs one input through a fresh decoder from `make`.
pub fn run<D: StreamDecoder>(data: &[u8], make: impl Fn() -> D) {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let ctrl_len = usize::from(head % 8).min(rest.len());
    let (ctrl, body) = rest.split_at(ctrl_len);
    let chunks = split(body, ctrl);

    assert_eq!(
        sse_events(&[body]),
        sse_events(&chunks),
        "SSE framing depends on the chunking ({} chunks)",
        chunks.len()
    );

    fastrand::seed(ID_SEED);
    let whole = feed_all(make(), &[body]);
    fastrand::seed(ID_SEED);
    let chunked = feed_all(make(), &chunks);
    assert_eq!(
        whole,
        chunked,
        "the same body split into {} chunks decoded differently",
        chunks.len()
    );

    fastrand::seed(ID_SEED);
    let (events, result) = client(make(), &chunks);
    check_tool_calls(&events, result.is_ok());
    let response = ModelResponse::from_events(&events);
    assert_eq!(
        response.tool_calls.len(),
        events
            .iter()
            .filter(|e| matches!(e, ModelEvent::ToolCallEnd { .. }))
            .count()
    );
}

/// `body` cut at the lengths in `ctrl`, cycled; the whole body when
/// `ctrl` is empty. Bounded: at most two chunks per body byte plus 16.
pub fn split<'a>(body: &'a [u8], ctrl: &[u8]) -> Vec<&'a [u8]> {
    if ctrl.is_empty() {
        return vec![body];
    }
    let mut chunks = Vec::new();
    let mut rest = body;
    let limit = body.len() * 2 + 16;
    let mut i = 0;
    while !rest.is_empty() && chunks.len() < limit {
        let n = usize::from(ctrl[i % ctrl.len()]).min(rest.len());
        let (chunk, tail) = rest.split_at(n);
        chunks.push(chunk);
        rest = tail;
        i += 1;
    }
    if !rest.is_empty() {
        chunks.push(rest);
    }
    chunks
}

/// The SSE events of `chunks` (framing alone: event names and ids too,
/// which the format decoders mostly ignore).
fn sse_events(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut sse = SseDecoder::new();
    let mut out = Vec::new();
    for chunk in chunks {
        sse.feed(chunk, &mut out);
    }
    sse.finish(&mut out);
    out
}

/// Feeds every chunk (going on after errors, as the parser allows) and
/// finishes: every event, and the first error as text.
fn feed_all<D: StreamDecoder>(decoder: D, chunks: &[&[u8]]) -> (Vec<ModelEvent>, Option<String>) {
    let mut parser = StreamParser::new(decoder);
    let mut out = Vec::new();
    let mut first_err = None;
    for chunk in chunks {
        if let Err(e) = parser.feed(chunk, &mut out) {
            first_err.get_or_insert(e.to_string());
        }
    }
    if let Err(e) = parser.finish(&mut out) {
        first_err.get_or_insert(e.to_string());
    }
    (out, first_err)
}

/// What `ProviderClient` does with a body: feed chunks until an error or
/// the end marker, `finish` when the body ends.
fn client<D: StreamDecoder>(decoder: D, chunks: &[&[u8]]) -> (Vec<ModelEvent>, Result<(), String>) {
    let mut parser = StreamParser::new(decoder);
    let mut out = Vec::new();
    for chunk in chunks {
        let r = parser.feed(chunk, &mut out);
        if let Err(e) = r {
            return (out, Err(e.to_string()));
        }
        if parser.is_done() {
            return (out, Ok(()));
        }
    }
    let r = parser.finish(&mut out).map_err(|e| e.to_string());
    (out, r)
}

#[derive(Default)]
struct CallSeen {
    started: bool,
    ended: bool,
}

/// The event grammar of `crates/provider/tests/provider/common.rs`
/// (`check_grammar`): each call starts once, its deltas come after its
/// start and before its end, it ends once; at most one `Usage` and one
/// `Finish`, nothing after `Finish`, no call open at `Finish`; and a stream
/// that ended without an error ended every call it started.
fn check_tool_calls(events: &[ModelEvent], clean_end: bool) {
    let mut calls: BTreeMap<usize, CallSeen> = BTreeMap::new();
    let (mut usages, mut finishes) = (0, 0);
    for (pos, event) in events.iter().enumerate() {
        assert_eq!(finishes, 0, "event {pos} after Finish: {event:?}");
        match event {
            ModelEvent::ToolCallStart { index, .. } => {
                let seen = calls.entry(*index).or_default();
                assert!(!seen.started, "event {pos}: call {index} started twice");
                seen.started = true;
            }
            ModelEvent::ToolCallDelta { index, .. } => {
                let seen = calls.entry(*index).or_default();
                assert!(
                    seen.started,
                    "event {pos}: delta of call {index} before its start"
                );
                assert!(
                    !seen.ended,
                    "event {pos}: delta of call {index} after its end"
                );
            }
            ModelEvent::ToolCallEnd { index, .. } => {
                let seen = calls.entry(*index).or_default();
                assert!(
                    seen.started,
                    "event {pos}: end of call {index} before its start"
                );
                assert!(!seen.ended, "event {pos}: call {index} ended twice");
                seen.ended = true;
            }
            ModelEvent::Usage { .. } => usages += 1,
            ModelEvent::Finish { .. } => {
                finishes += 1;
                for (index, seen) in &calls {
                    assert!(seen.ended, "event {pos}: call {index} open at Finish");
                }
            }
            _ => {}
        }
    }
    assert!(usages <= 1, "{usages} Usage events");
    if clean_end {
        for (index, seen) in &calls {
            assert!(
                seen.ended,
                "call {index} started but the stream ended cleanly without its end"
            );
        }
    }
}
