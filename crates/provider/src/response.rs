//! Folding a stream of [`ModelEvent`]s into one complete response.

use futures::{Stream, StreamExt};
use troupe_protocol::Usage;

use super::ProviderError;
use super::types::{FinishReason, ModelEvent, ReasoningBlock, ToolCall};

/// A complete model response: what the events of one stream add up to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelResponse {
    /// The answer text.
    pub text: String,
    /// The reasoning text.
    pub reasoning: String,
    /// The complete reasoning blocks, in order.
    pub reasoning_blocks: Vec<ReasoningBlock>,
    /// The tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Usage, when the provider reported it.
    pub usage: Option<Usage>,
    /// The normalized finish reason (`None` until `Finish` arrived).
    pub finish: Option<FinishReason>,
    /// The finish reason as the provider sent it.
    pub finish_raw: Option<String>,
}

impl ModelResponse {
    /// Folds one event in.
    pub fn apply(&mut self, event: &ModelEvent) {
        match event {
            ModelEvent::TextDelta { text } => self.text.push_str(text),
            ModelEvent::ReasoningDelta { text } => self.reasoning.push_str(text),
            ModelEvent::ReasoningBlock { block } => self.reasoning_blocks.push(block.clone()),
            ModelEvent::ToolCallStart { .. } | ModelEvent::ToolCallDelta { .. } => {}
            ModelEvent::ToolCallEnd { call, .. } => self.tool_calls.push(call.clone()),
            ModelEvent::Usage { usage } => self.usage = Some(*usage),
            ModelEvent::Finish { reason, raw } => {
                self.finish = Some(*reason);
                self.finish_raw = raw.clone();
            }
        }
    }

    /// Folds a whole event list.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a ModelEvent>) -> Self {
        let mut r = Self::default();
        for e in events {
            r.apply(e);
        }
        r
    }

    /// Reads a stream to its end; the first error ends it.
    pub async fn collect<S>(stream: S) -> Result<Self, ProviderError>
    where
        S: Stream<Item = Result<ModelEvent, ProviderError>>,
    {
        let mut r = Self::default();
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            r.apply(&event?);
        }
        Ok(r)
    }
}
