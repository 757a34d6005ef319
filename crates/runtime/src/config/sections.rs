//! The tables of `troupe.toml`, one struct each, with their defaults.
//!
//! Every struct denies unknown keys, so a typo is an error naming the
//! valid keys rather than a silently ignored setting.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

use crate::hooks::HookCommand;
use crate::provider::{ProviderKind, ProviderProfile, SecretString, ToolCallFallback};
use crate::store::FsyncPolicy;

/// `[agent]`: which model runs the loop and how long.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// A provider kind (`openai`, `anthropic`, `gemini`, `openai-responses`) or the name of a
    /// `[providers.<name>]` table. `openai` is any OpenAI-compatible server.
    pub provider: String,
    /// The model; `None` uses the provider kind's default
    /// ([`default_model`]).
    pub model: Option<String>,
    /// Most model turns per request (`AGENT_MAX_TURNS_PER_REQUEST`).
    pub max_turns: u32,
    /// Most tool calls of one step run at the same time.
    pub max_parallel_tools: usize,
    /// Replaces the built-in system prompt.
    pub system_prompt: Option<String>,
    /// Where the loop fails over on a stream error (never when the model
    /// is pinned).
    pub fallback: Option<FallbackConfig>,
    /// `[agent.harness]`: budget, compaction, event export, context reset.
    pub harness: HarnessConfig,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            provider: "openai".to_owned(),
            model: None,
            max_turns: 15,
            max_parallel_tools: 8,
            system_prompt: None,
            fallback: None,
            harness: HarnessConfig::default(),
        }
    }
}

/// `[agent.fallback]`: the provider failover target.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackConfig {
    /// A provider kind or `[providers.<name>]` name.
    pub provider: String,
    /// The model; `None` uses the provider kind's default.
    #[serde(default)]
    pub model: Option<String>,
}

/// `approvals_reviewer`: who answers approval requests besides a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalsReviewer {
    /// People only (a terminal, `troupe approvals`, HTTP, the library's
    /// handler).
    #[default]
    User,
    /// A fresh read-only reviewer agent that fails closed.
    Agent,
}

/// When the loop discards the transcript and reorients from artifacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextResetMode {
    /// Never (the default).
    #[default]
    Off,
    /// After `stall_threshold` consecutive stalled turns: the same as
    /// `stall_action = "reset"`.
    OnStall,
    /// After every auto-compaction.
    OnCompaction,
}

/// `[agent.harness]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HarnessConfig {
    /// Stop the session once its estimated cost reaches this many USD;
    /// `None` is no budget. Not enforced for models without pricing.
    pub max_budget_usd: Option<f64>,
    /// Stop once the session's agents together used this many tokens
    /// (input + output); `None` is no cap.
    pub max_tokens: Option<u64>,
    /// Stop once the session's agents together ran this many model steps;
    /// `None` is no cap (each agent still has `max_turns`).
    pub max_steps: Option<u32>,
    /// Compact the history automatically near the context ceiling.
    pub auto_compaction_enabled: bool,
    /// An explicit compaction threshold in tokens (still capped by the
    /// model's window); `None` uses 90 % of the effective window.
    pub auto_compaction_threshold_tokens: Option<u64>,
    /// Also write events to this JSONL file (a compatibility export; the
    /// canonical store is unaffected). Relative to the workspace.
    pub event_log_path: Option<PathBuf>,
    /// When to reset the context.
    pub context_reset_mode: ContextResetMode,
    /// The older name of `stall_threshold` (used when that is not set).
    pub context_reset_stall_threshold: u32,
    /// Consecutive turns without progress (a turn repeating one of the
    /// last three turns' calls and results, or a second `handoff`) before
    /// `stall_action`; `None`: `context_reset_stall_threshold` (3).
    pub stall_threshold: Option<u32>,
    /// What to do when an agent stalls; `None`: `reset` when
    /// `context_reset_mode = "on_stall"`, else `nudge`.
    pub stall_action: Option<troupe_protocol::StallAction>,
}

impl HarnessConfig {
    /// The stall threshold in effect (at least 1).
    pub fn effective_stall_threshold(&self) -> u32 {
        self.stall_threshold
            .unwrap_or(self.context_reset_stall_threshold)
            .max(1)
    }

    /// The stall action in effect.
    pub fn effective_stall_action(&self) -> troupe_protocol::StallAction {
        match (self.stall_action, self.context_reset_mode) {
            (Some(action), _) => action,
            (None, ContextResetMode::OnStall) => troupe_protocol::StallAction::Reset,
            (None, _) => troupe_protocol::StallAction::Nudge,
        }
    }
}

impl Default for HarnessConfig {
    fn default() -> Self {
        Self {
            max_budget_usd: None,
            max_tokens: None,
            max_steps: None,
            auto_compaction_enabled: true,
            auto_compaction_threshold_tokens: None,
            event_log_path: None,
            context_reset_mode: ContextResetMode::Off,
            context_reset_stall_threshold: 3,
            stall_threshold: None,
            stall_action: None,
        }
    }
}

/// `[context]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// The session's context ceiling in tokens, below the model's window
    /// when smaller.
    pub max_context_tokens: u64,
    /// Move to the largest-context model at 75 % of the window
    /// (`CONTEXT_AUTO_UPGRADE`).
    pub auto_upgrade: bool,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            max_context_tokens: 160_000,
            auto_upgrade: false,
        }
    }
}

/// `[providers.<name>]`: how to reach one provider. The name is a kind
/// (`openai`, `anthropic`, `gemini`), or any other name with `kind` set
/// (`[providers.ollama]` with `kind = "openai"`).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderSettings {
    /// The wire format; defaults to the table's name when that is a kind.
    #[serde(deserialize_with = "de_kind")]
    pub kind: Option<ProviderKind>,
    /// The base URL; defaults to the kind's official one.
    pub base_url: Option<String>,
    /// The environment variable holding the key. Defaults to the kind's
    /// standard variable for a kind-named table, and to no key for a
    /// custom-named one (so a local server never receives a hosted key).
    pub api_key_env: Option<String>,
    /// Extra headers sent with every request (treated as secrets).
    #[serde(deserialize_with = "de_headers")]
    pub headers: BTreeMap<String, SecretString>,
    /// Which defaults the time limits take: `hosted` (10 s / 60 s /
    /// 300 s) or `local` (10 s / 20 min / 20 min, for a model served on
    /// this machine). Unset: `local` when the base URL's host is a
    /// loopback address, else `hosted`.
    pub profile: Option<ProviderProfile>,
    /// Connect timeout in milliseconds.
    pub connect_timeout_ms: Option<u64>,
    /// Time to the response headers in milliseconds.
    pub first_byte_timeout_ms: Option<u64>,
    /// Longest silence between body chunks in milliseconds.
    pub idle_timeout_ms: Option<u64>,
    /// Retries after the first attempt.
    pub max_retries: Option<u32>,
    /// First retry delay in milliseconds (it doubles).
    pub initial_backoff_ms: Option<u64>,
    /// Cap on one retry delay in milliseconds.
    pub max_backoff_ms: Option<u64>,
    /// Read tool calls the model wrote as text when a response has no
    /// native one: `fenced_json` (```` ```json {"name", "arguments"} ``` ````)
    /// or `hermes` (`<tool_call>{...}</tool_call>`). Unset: never.
    pub tool_call_fallback: Option<ToolCallFallback>,
    /// Which OpenAI API an `openai` kind speaks (Codex's key): `chat`
    /// (chat completions, the default) or `responses` (the Responses API,
    /// the same as `kind = "openai-responses"`).
    pub wire_api: Option<WireApi>,
    /// Sampling temperature of every request (0 to 2); unset sends none.
    pub temperature: Option<f32>,
    /// Sampling seed of every request (OpenAI-compatible chat, Gemini);
    /// unset sends none.
    pub seed: Option<u64>,
    /// Cap on each answer's output tokens (`max_tokens`); unset sends none
    /// (a compaction summary sets its own).
    pub max_output_tokens: Option<u32>,
}

/// `wire_api` of an OpenAI-compatible provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireApi {
    /// Chat completions (`{base}/chat/completions`).
    Chat,
    /// The Responses API (`{base}/responses`).
    Responses,
}

impl ProviderSettings {
    /// The kind this table configures: `kind` (or the table's name when
    /// that is a kind), turned into the Responses API by
    /// `wire_api = "responses"`.
    pub fn effective_kind(&self, name: &str) -> Option<ProviderKind> {
        let kind = self.kind.or_else(|| parse_kind(name))?;
        Some(match (kind, self.wire_api) {
            (ProviderKind::OpenAi, Some(WireApi::Responses)) => ProviderKind::OpenAiResponses,
            (ProviderKind::OpenAiResponses, Some(WireApi::Chat)) => ProviderKind::OpenAi,
            (kind, _) => kind,
        })
    }
}

/// The names `kind` accepts, in the file's spelling.
pub const PROVIDER_KINDS: &[&str] = &["openai", "anthropic", "gemini", "openai-responses"];

/// Parses a provider kind as written in `troupe.toml`.
pub fn parse_kind(name: &str) -> Option<ProviderKind> {
    match name {
        "openai" => Some(ProviderKind::OpenAi),
        "anthropic" => Some(ProviderKind::Anthropic),
        "gemini" => Some(ProviderKind::Gemini),
        "openai-responses" => Some(ProviderKind::OpenAiResponses),
        _ => None,
    }
}

/// The model used when none is configured.
pub fn default_model(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAi => "gpt-4.1",
        ProviderKind::OpenAiResponses => "gpt-5",
        ProviderKind::Anthropic => "claude-sonnet-4-5",
        ProviderKind::Gemini => "gemini-2.5-pro",
    }
}

fn de_kind<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ProviderKind>, D::Error> {
    let name = String::deserialize(d)?;
    parse_kind(&name)
        .map(Some)
        .ok_or_else(|| serde::de::Error::unknown_variant(&name, PROVIDER_KINDS))
}

/// Header values, each kept secret (`[providers.NAME] headers`,
/// `[telemetry.otel] headers`).
pub(super) fn de_headers<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, SecretString>, D::Error> {
    let raw = BTreeMap::<String, String>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| (k, SecretString::new(v)))
        .collect())
}

/// `[tools]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// How long an `exec_command` call waits when it gives no
    /// `timeout_ms`, in milliseconds; `None` keeps the tool's default.
    pub exec_timeout_ms: Option<u64>,
    /// Paths `write_file` and `edit_file` refuse, relative to the
    /// workspace; `None` keeps the default (`.vtcode`, `.git`,
    /// `troupe.toml`), `[]` protects nothing. See
    /// [`crate::tools::ProtectedPaths`] for how entries match.
    pub protected_paths: Option<Vec<String>>,
    /// Tool calls run per step (default 64); the calls past it are
    /// answered with an error and dropped from the history.
    pub max_calls_per_step: Option<u64>,
    /// Bytes of one call's arguments (default 1 MiB); a bigger call is
    /// answered with an error and its arguments are not kept.
    pub max_argument_bytes: Option<u64>,
    /// Bytes of `exec_command` spool files kept per session (default
    /// 256 MiB); past it, outputs are previewed but not spooled.
    pub max_spool_bytes: Option<u64>,
}

/// `[verifier]`: the read-only verifier.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerifierConfig {
    /// Where Landlock cannot fully enforce the read-only sandbox, run the
    /// verifier's `exec_command` without it (default `false`: the
    /// verifier is refused with an error instead).
    pub allow_unsandboxed: bool,
    /// Let `merge_worktree` merge a worktree no verifier approved at its
    /// current head (default `false`: such a merge is refused).
    pub allow_unverified_merge: bool,
}

/// `[sandbox_workspace_write]`: the confined modes' network (Codex's
/// table name; it applies to `read-only` too).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxWorkspaceWrite {
    /// Let commands open TCP connections and listen (default `false`).
    pub network_access: bool,
}

/// `[permissions]`: tool allow and deny rules (deny wins), as patterns
/// like `read_file`, `exec_command(git push*)` or `*`. The rules are
/// interpreted by the tools' permission policy.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionsConfig {
    /// Calls that may run; empty allows every call no deny rule matches.
    pub allow: Vec<String>,
    /// Calls that never run.
    pub deny: Vec<String>,
    /// Calls that always ask before they run (docs/approvals.md);
    /// precedence: deny, then ask, then allow.
    pub ask: Vec<String>,
}

/// `[hooks]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HooksSection {
    /// `[hooks.lifecycle]`.
    pub lifecycle: LifecycleHooks,
}

/// `[hooks.lifecycle]`: shell commands per lifecycle event, each a string
/// or a table `{ command = "...", sandbox = "none" }` ([`HookCommand`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LifecycleHooks {
    /// When a session starts.
    pub session_start: Vec<HookCommand>,
    /// Before each tool call; exit code 2 blocks it.
    pub pre_tool_use: Vec<HookCommand>,
    /// After each tool call.
    pub post_tool_use: Vec<HookCommand>,
    /// When the session ends.
    pub stop: Vec<HookCommand>,
    /// Before a compaction boundary is recorded.
    pub pre_compact: Vec<HookCommand>,
    /// Per-command timeout in milliseconds.
    pub timeout_ms: u64,
}

impl Default for LifecycleHooks {
    fn default() -> Self {
        Self {
            session_start: Vec::new(),
            pre_tool_use: Vec::new(),
            post_tool_use: Vec::new(),
            stop: Vec::new(),
            pre_compact: Vec::new(),
            timeout_ms: 10_000,
        }
    }
}

/// `[export]`: standard trajectories written under a session's `derived/`
/// when it ends (and again after a resume), derived from its log
/// (docs/exports.md). Both off by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExportConfig {
    /// Write `derived/trajectory.atif.json` (ATIF).
    pub atif: bool,
    /// Write `derived/open-responses.jsonl` (an Open Responses stream).
    pub open_responses: bool,
}

/// `[session]`: the canonical store.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// When the log writer fsyncs: `always`, `batch` or `never`.
    pub fsync: FsyncPolicy,
    /// Closed sessions kept.
    pub retention_max_sessions: usize,
    /// Closed sessions older than this many days are deleted.
    pub retention_max_age_days: u64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            fsync: FsyncPolicy::Batch,
            retention_max_sessions: 50,
            retention_max_age_days: 30,
        }
    }
}
