//! The decoder interface shared by the three wire formats, and the pieces
//! they share: the SSE + format parser, and tool-call bookkeeping.

use super::ProviderError;
use super::sse::{SseDecoder, SseEvent};
use super::types::{ModelEvent, ToolCall};

/// Turns the SSE events of one provider's stream into [`ModelEvent`]s.
///
/// A decoder knows nothing about HTTP, so it can be tested on recorded
/// bytes. After an `Err` it stays usable: a caller that wants to see the
/// rest of the stream may keep feeding it.
pub trait StreamDecoder: Send {
    /// Decodes one SSE event, appending normalized events to `out`.
    /// An error reported inside the stream becomes `Err`.
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError>;

    /// True once the stream's end was seen (`[DONE]`, `message_stop`);
    /// the final `Usage` and `Finish` events were emitted then, and the
    /// client stops reading.
    fn is_done(&self) -> bool;

    /// The input ended. Emits what is still open (tool call ends, usage,
    /// finish), or fails with [`ProviderError::StreamBroken`] when the
    /// stream was cut before its end.
    fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError>;
}

impl<D: StreamDecoder + ?Sized> StreamDecoder for Box<D> {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        (**self).decode(event, out)
    }

    fn is_done(&self) -> bool {
        (**self).is_done()
    }

    fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        (**self).finish(out)
    }
}

/// An SSE decoder and a format decoder chained: raw body bytes in,
/// [`ModelEvent`]s out.
#[derive(Debug)]
pub struct StreamParser<D> {
    sse: SseDecoder,
    decoder: D,
    scratch: Vec<SseEvent>,
}

impl<D: StreamDecoder> StreamParser<D> {
    /// A parser at the start of a response body.
    pub fn new(decoder: D) -> Self {
        Self {
            sse: SseDecoder::new(),
            decoder,
            scratch: Vec::new(),
        }
    }

    /// Feeds one chunk of the body. Every SSE event it completes is decoded
    /// (events after the stream's end marker are ignored); the first error
    /// is returned after the whole chunk was processed.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        self.sse.feed(chunk, &mut self.scratch);
        self.decode_scratch(out)
    }

    /// The body ended: flushes the SSE decoder and finishes the format
    /// decoder (which fails if the stream was cut).
    pub fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        self.sse.finish(&mut self.scratch);
        let first = self.decode_scratch(out);
        if self.decoder.is_done() {
            return first;
        }
        let end = self.decoder.finish(out);
        first.and(end)
    }

    /// True once the format decoder saw the stream's end.
    pub fn is_done(&self) -> bool {
        self.decoder.is_done()
    }

    fn decode_scratch(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        let mut first_err = None;
        for ev in self.scratch.drain(..) {
            if self.decoder.is_done() {
                break;
            }
            if let Err(e) = self.decoder.decode(&ev, out) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Parses an SSE data payload as JSON, mapping a parse failure to
/// [`ProviderError::StreamBroken`].
pub(crate) fn parse_json<'a, T: serde::Deserialize<'a>>(data: &'a str) -> Result<T, ProviderError> {
    serde_json::from_str(data).map_err(|e| {
        let head: String = data.chars().take(120).collect();
        ProviderError::stream_broken(format!("invalid JSON chunk ({e}): {head}"))
    })
}

/// A new prefix for generated call ids, unique enough per response.
pub(crate) fn random_id_prefix() -> String {
    format!("{:08x}", fastrand::u32(..))
}

/// An empty or blank argument string becomes `{}`.
pub(crate) fn normalize_arguments(args: String) -> String {
    if args.trim().is_empty() {
        "{}".to_owned()
    } else {
        args
    }
}

/// One tool call being assembled from deltas.
#[derive(Debug, Default)]
pub(crate) struct PendingCall {
    /// Position among this response's calls.
    pub ordinal: usize,
    pub id: String,
    pub name: String,
    pub args: String,
    pub started: bool,
    pub ended: bool,
    pub signature: Option<String>,
}

impl PendingCall {
    /// Emits `ToolCallStart` (generating an id if none was sent) and the
    /// arguments gathered so far, once the name is known.
    pub fn start_if_ready(&mut self, id_prefix: &str, out: &mut Vec<ModelEvent>) {
        if self.started || self.name.is_empty() {
            return;
        }
        if self.id.is_empty() {
            self.id = format!("call_{id_prefix}_{}", self.ordinal);
        }
        self.started = true;
        out.push(ModelEvent::ToolCallStart {
            index: self.ordinal,
            id: self.id.clone(),
            name: self.name.clone(),
        });
        if !self.args.is_empty() {
            out.push(ModelEvent::ToolCallDelta {
                index: self.ordinal,
                arguments: self.args.clone(),
            });
        }
    }

    /// Appends an argument fragment, emitting it if the call has started.
    /// A fragment after the call's end is ignored: the call was already
    /// handed over whole (a `ToolCallDelta` after its `ToolCallEnd` would
    /// break the event grammar; found by fuzzing, docs/security.md#fuzzing).
    pub fn push_args(&mut self, fragment: &str, out: &mut Vec<ModelEvent>) {
        if fragment.is_empty() {
            return;
        }
        if self.ended {
            tracing::debug!(
                index = self.ordinal,
                "tool call arguments after its end ignored"
            );
            return;
        }
        self.args.push_str(fragment);
        if self.started {
            out.push(ModelEvent::ToolCallDelta {
                index: self.ordinal,
                arguments: fragment.to_owned(),
            });
        }
    }

    /// Emits `ToolCallEnd` (starting the call first if it never got a name).
    pub fn end(&mut self, id_prefix: &str, out: &mut Vec<ModelEvent>) {
        if self.ended {
            return;
        }
        if !self.started {
            if self.name.is_empty() {
                tracing::warn!(index = self.ordinal, "tool call ended without a name");
                self.name = "unknown".to_owned();
            }
            self.start_if_ready(id_prefix, out);
        }
        self.ended = true;
        out.push(ModelEvent::ToolCallEnd {
            index: self.ordinal,
            call: ToolCall {
                id: self.id.clone(),
                name: self.name.clone(),
                arguments: normalize_arguments(std::mem::take(&mut self.args)),
                signature: self.signature.take(),
            },
        });
    }
}
