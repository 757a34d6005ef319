//! Client configuration: which wire format, where, with which key.

use std::time::Duration;

use super::openai::MaxTokensField;
use super::retry::RetryPolicy;
use super::secret::{KeySource, SecretString};
use super::text_calls::ToolCallFallback;

/// The wire format a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI-compatible chat completions (`{base}/chat/completions`).
    OpenAi,
    /// Anthropic messages (`{base}/v1/messages`).
    Anthropic,
    /// Gemini (`{base}/v1beta/models/{model}:streamGenerateContent?alt=sse`).
    Gemini,
    /// The OpenAI Responses API (`{base}/responses`), stateless
    /// (`store: false`, the whole input sent each time). Written
    /// `openai-responses` in `troupe.toml` and on the command line.
    OpenAiResponses,
}

impl ProviderKind {
    /// The official base URL, following each official SDK's convention:
    /// OpenAI's includes the version, Anthropic's and Gemini's do not.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Self::OpenAi | Self::OpenAiResponses => "https://api.openai.com/v1",
            Self::Anthropic => "https://api.anthropic.com",
            Self::Gemini => "https://generativelanguage.googleapis.com",
        }
    }

    /// The environment variable the key is read from by default.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Self::OpenAi | Self::OpenAiResponses => "OPENAI_API_KEY",
            Self::Anthropic => "ANTHROPIC_API_KEY",
            Self::Gemini => "GEMINI_API_KEY",
        }
    }

    /// The streaming endpoint for `model` under `base_url`.
    pub fn endpoint(self, base_url: &str, model: &str) -> String {
        let base = base_url.trim_end_matches('/');
        match self {
            Self::OpenAi => format!("{base}/chat/completions"),
            Self::Anthropic => format!("{base}/v1/messages"),
            Self::Gemini => format!("{base}/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            Self::OpenAiResponses => format!("{base}/responses"),
        }
    }
}

/// Time limits of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To open the TCP (and TLS) connection.
    pub connect: Duration,
    /// From sending the request to the first byte of the response (its
    /// status line and headers). Tripping it is retryable.
    pub first_byte: Duration,
    /// The longest wait for the next body chunk, counted from the headers
    /// for the first one. Reasoning models can be silent for a long time
    /// before their first token, so keep it generous. Tripping it is a
    /// broken stream.
    pub idle: Duration,
}

impl Default for Timeouts {
    /// The hosted defaults: 10 s / 60 s / 300 s.
    fn default() -> Self {
        Self::hosted()
    }
}

impl Timeouts {
    /// The defaults for a hosted API: connect 10 s, first byte 60 s,
    /// idle 300 s.
    pub const fn hosted() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(60),
            idle: Duration::from_secs(300),
        }
    }

    /// The defaults for a model served on this machine (llama.cpp, Ollama,
    /// vLLM, LM Studio): connect 10 s, first byte and idle 20 minutes
    /// each. A CPU server reads a prompt at 20–50 tokens/s, so a
    /// 12,000-token prompt takes 4–10 minutes before its first token, and
    /// servers differ in whether that wait comes before the response
    /// headers (llama.cpp) or after them (vLLM): both limits get twice the
    /// slowest case.
    pub const fn local() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(LOCAL_WAIT_SECS),
            idle: Duration::from_secs(LOCAL_WAIT_SECS),
        }
    }
}

/// The first-byte and idle limits of [`Timeouts::local`], in seconds.
const LOCAL_WAIT_SECS: u64 = 20 * 60;

/// Which defaults a provider's time limits take (`profile` in
/// `troupe.toml`'s `[providers.<name>]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderProfile {
    /// A hosted API: [`Timeouts::hosted`].
    #[default]
    Hosted,
    /// A model served on this machine or the local network:
    /// [`Timeouts::local`].
    Local,
}

impl ProviderProfile {
    /// `Local` when `base_url`'s host is a loopback address (`localhost`,
    /// a `*.localhost` name, `127.0.0.0/8`, `::1`), else `Hosted`. A URL
    /// that does not parse is `Hosted`.
    pub fn detect(base_url: &str) -> Self {
        let Ok(url) = reqwest::Url::parse(base_url) else {
            return Self::Hosted;
        };
        let host = url.host_str().unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let local = match host.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
            Ok(std::net::IpAddr::V6(ip)) => {
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
            Err(_) => {
                let d = host.trim_end_matches('.').to_ascii_lowercase();
                d == "localhost" || d.ends_with(".localhost")
            }
        };
        if local { Self::Local } else { Self::Hosted }
    }

    /// The time limits this profile starts from.
    pub const fn timeouts(self) -> Timeouts {
        match self {
            Self::Hosted => Timeouts::hosted(),
            Self::Local => Timeouts::local(),
        }
    }

    /// As written in `troupe.toml`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Hosted => "hosted",
            Self::Local => "local",
        }
    }
}

/// Sampling defaults a client puts on every request that sets none of its
/// own (`[providers.<name>]` `temperature`, `seed`, `max_output_tokens`):
/// a local model run at temperature 0 with a fixed seed and a bounded
/// answer, whoever builds the request (an agent, a subagent, a verifier,
/// a compaction summary). A request's own value wins.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sampling {
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Sampling seed (sent where the wire format has one, see
    /// [`ModelRequest::seed`](super::ModelRequest::seed)).
    pub seed: Option<u64>,
    /// Cap on output tokens.
    pub max_output_tokens: Option<u32>,
}

impl Sampling {
    /// Whether it sets nothing.
    pub fn is_empty(&self) -> bool {
        *self == Sampling::default()
    }
}

/// Everything a [`ProviderClient`](super::ProviderClient) needs.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// The wire format.
    pub kind: ProviderKind,
    /// The base URL (see [`ProviderKind::default_base_url`] for the
    /// convention of each format).
    pub base_url: String,
    /// Where the key comes from.
    pub api_key: KeySource,
    /// Extra headers sent with every request (values are treated as
    /// secrets: marked sensitive, never logged).
    pub headers: Vec<(String, SecretString)>,
    /// Time limits.
    pub timeouts: Timeouts,
    /// Retry policy.
    pub retry: RetryPolicy,
    /// The OpenAI output-cap field; `None` picks `max_completion_tokens`
    /// for api.openai.com and `max_tokens` elsewhere.
    pub max_tokens_field: Option<MaxTokensField>,
    /// Sampling defaults for requests that set none.
    pub sampling: Sampling,
    /// The profile [`Self::timeouts`] started from (named in timeout
    /// errors).
    pub profile: ProviderProfile,
    /// Read tool calls the model wrote as text, when a response has no
    /// native call ([`super::text_calls`]); `None`: never.
    pub tool_call_fallback: Option<ToolCallFallback>,
    /// The name of the `troupe.toml` table this config came from
    /// (`[providers.<name>]`), so a timeout error names the key that
    /// raises the limit; `None` for a config built in code.
    pub name: Option<String>,
}

impl ProviderConfig {
    /// The defaults of `kind`: official base URL, key from the standard
    /// environment variable, default timeouts and retries.
    pub fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            base_url: kind.default_base_url().to_owned(),
            api_key: KeySource::Env(kind.default_key_env().to_owned()),
            headers: Vec::new(),
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
            max_tokens_field: None,
            sampling: Sampling::default(),
            profile: ProviderProfile::Hosted,
            tool_call_fallback: None,
            name: None,
        }
    }

    /// OpenAI (or any compatible server, with [`Self::with_base_url`]).
    pub fn openai() -> Self {
        Self::new(ProviderKind::OpenAi)
    }

    /// Anthropic.
    pub fn anthropic() -> Self {
        Self::new(ProviderKind::Anthropic)
    }

    /// Gemini.
    pub fn gemini() -> Self {
        Self::new(ProviderKind::Gemini)
    }

    /// The OpenAI Responses API (or a compatible server, with
    /// [`Self::with_base_url`]).
    pub fn openai_responses() -> Self {
        Self::new(ProviderKind::OpenAiResponses)
    }

    /// Sets the base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Reads the key from the environment variable `var`.
    pub fn with_key_env(mut self, var: impl Into<String>) -> Self {
        self.api_key = KeySource::Env(var.into());
        self
    }

    /// Uses `key`.
    pub fn with_key(mut self, key: impl Into<SecretString>) -> Self {
        self.api_key = KeySource::Value(key.into());
        self
    }

    /// Sends no key.
    pub fn without_key(mut self) -> Self {
        self.api_key = KeySource::None;
        self
    }

    /// Adds a header sent with every request.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<SecretString>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the timeouts.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Uses `profile`'s time limits ([`ProviderProfile::timeouts`]); set
    /// explicit limits after it with [`Self::with_timeouts`].
    pub fn with_profile(mut self, profile: ProviderProfile) -> Self {
        self.profile = profile;
        self.timeouts = profile.timeouts();
        self
    }

    /// Names the `troupe.toml` table (`[providers.<name>]`) this config
    /// came from, for error messages.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Reads tool calls written as text in `style` ([`super::text_calls`]).
    pub fn with_tool_call_fallback(mut self, style: ToolCallFallback) -> Self {
        self.tool_call_fallback = Some(style);
        self
    }

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the sampling defaults.
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// The OpenAI output-cap field this config uses.
    pub fn effective_max_tokens_field(&self) -> MaxTokensField {
        self.max_tokens_field.unwrap_or({
            if self.base_url.contains("api.openai.com") {
                MaxTokensField::MaxCompletionTokens
            } else {
                MaxTokensField::MaxTokens
            }
        })
    }
}
