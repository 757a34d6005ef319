//! Model provider clients that stream normalized [`ModelEvent`]s.
//!
//! # Layout
//! - [`types`]: the provider-neutral [`ModelRequest`] (system prompt,
//!   messages, tools) and the [`ModelEvent`]s a stream yields.
//! - [`ModelClient`]: the trait the agent loop talks to;
//!   [`ProviderClient`] implements it over HTTP for the three formats,
//!   chosen by [`ProviderConfig::kind`]:
//!   OpenAI-compatible chat completions ([`openai`], also Ollama, vLLM,
//!   llama.cpp, LM Studio, OpenRouter, Groq... via `base_url`),
//!   Anthropic messages ([`anthropic`]), Gemini ([`gemini`]) and the
//!   OpenAI Responses API ([`responses`]).
//! - [`sse`]: the incremental SSE decoder (bytes in, events out);
//!   [`StreamDecoder`] and [`StreamParser`] chain it with a format
//!   decoder, with no HTTP, so recorded streams can be replayed.
//! - [`ProviderError`]: classified errors (retryable, context overflow,
//!   auth, bad request, stream broken); [`RetryPolicy`]: backoff.
//! - [`text_calls`]: tool calls a model wrote as text (fenced JSON,
//!   Hermes tags), read into real calls when
//!   [`ProviderConfig::tool_call_fallback`] is set.
//! - [`SecretString`] / [`KeySource`]: keys that never print.
//! - [`ModelCatalog`]: context windows, output caps, prices, cost.
//!
//! ```no_run
//! # async fn demo() -> Result<(), troupe_provider::ProviderError> {
//! use troupe_provider::*;
//! let client = ProviderClient::new(ProviderConfig::anthropic())?;
//! let request = ModelRequest::new("claude-sonnet-4-5")
//!     .with_system("Be brief.")
//!     .with_message(Message::user("Hello"));
//! let response = ModelResponse::collect(client.stream(&request)).await?;
//! println!("{}", response.text);
//! # Ok(()) }
//! ```

pub mod anthropic;
mod catalog;
mod client;
mod config;
mod decode;
mod error;
pub mod gemini;
pub mod openai;
mod openai_wire;
mod response;
pub mod responses;
mod responses_wire;
mod retry;
mod secret;
pub mod sse;
pub mod text_calls;
mod turns;
pub mod types;

pub use anthropic::{AnthropicDecoder, DEFAULT_ANTHROPIC_MAX_TOKENS};
pub use catalog::{ModelCatalog, ModelInfo, ModelOverride, Pricing};
pub use client::{ProviderClient, install_crypto_provider};
pub use config::{ProviderConfig, ProviderKind, ProviderProfile, Sampling, Timeouts};
pub use decode::{StreamDecoder, StreamParser};
pub use error::{ProviderError, is_context_overflow_text};
pub use gemini::GeminiDecoder;
pub use openai::{MaxTokensField, OpenAiDecoder};
pub use response::ModelResponse;
pub use responses::ResponsesDecoder;
pub use retry::{RetryPolicy, parse_retry_after};
pub use secret::{KeySource, SecretString};
pub use sse::{SseDecoder, SseEvent};
pub use text_calls::{ToolCallFallback, parse_text_tool_calls, with_text_tool_calls};
pub use types::{
    FinishReason, Message, ModelEvent, ModelRequest, ReasoningBlock, ReasoningEffort, ToolCall,
    ToolDefinition,
};

/// The events of one streamed model call. The first `Err` is the last item.
pub type ModelEventStream = futures::stream::BoxStream<'static, Result<ModelEvent, ProviderError>>;

/// A model the agent loop can call.
///
/// Implemented by [`ProviderClient`] for the three HTTP formats; a library
/// user (or a test) can implement it for anything else. The stream owns
/// everything it needs, so it may outlive `self`; dropping it cancels the
/// call.
pub trait ModelClient: Send + Sync {
    /// Starts one streamed call. Nothing is sent until the stream is polled.
    fn stream(&self, request: &ModelRequest) -> ModelEventStream;
}
