//! The Codex-compatible command line of `troupe exec` (docs/cli.md): what
//! the Codex TypeScript SDK passes (`--experimental-json`, `--config
//! KEY=VALUE`, `--sandbox`, `--cd`, `resume ID`, ...) mapped onto troupe's
//! settings, and the Codex-granularity stdout stream of
//! `--experimental-json`.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use troupe_protocol::Usage;
use troupe_runtime::store::Exporter;

use crate::failure::Failure;

/// The Codex flags `troupe exec` accepts.
#[derive(Debug, Default, Args)]
pub struct CodexArgs {
    /// Codex's name for --json: one JSON event per line on stdout, with
    /// Codex's turn granularity (one turn.started, then one turn.completed
    /// with the run's total usage, or one turn.failed).
    #[arg(global = true, long)]
    pub experimental_json: bool,
    /// A Codex configuration override KEY=VALUE (VALUE in TOML; repeatable).
    /// openai_base_url, model, model_reasoning_effort, sandbox_mode,
    /// sandbox_workspace_write.network_access and approval_policy="never"
    /// are understood; other keys are ignored with one warning.
    #[arg(global = true, long = "config", short = 'c', value_name = "KEY=VALUE")]
    pub config: Vec<String>,
    /// The agents' sandbox_mode (docs/security.md): read-only,
    /// workspace-write (the default) or danger-full-access.
    #[arg(global = true, long, short = 's', value_enum, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,
    /// Accepted for Codex compatibility (troupe needs no git repository).
    #[arg(global = true, long)]
    pub skip_git_repo_check: bool,
    /// Accepted with a warning: troupe's tools only reach the workspace.
    #[arg(global = true, long = "add-dir", value_name = "DIR")]
    pub add_dir: Vec<PathBuf>,
    /// Accepted with a warning: troupe does not check the final answer
    /// against a schema.
    #[arg(global = true, long, value_name = "FILE")]
    pub output_schema: Option<PathBuf>,
    /// Images are refused: troupe sends text only.
    #[arg(long = "image", short = 'i', value_name = "FILE")]
    pub image: Vec<PathBuf>,
    /// Codex metadata, accepted and ignored.
    #[arg(global = true, long, hide = true)]
    pub thread_source: Option<String>,
    /// Codex metadata, accepted and ignored.
    #[arg(global = true, long, hide = true)]
    pub cyber_access_program: Option<String>,
}

/// The `--sandbox` values (Codex's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxMode {
    /// Commands read everything and write only a scratch directory; the
    /// write tools are refused.
    ReadOnly,
    /// The default: commands write only in the workspace (never `.git`,
    /// `.vtcode`, troupe.toml) and a scratch directory; no network.
    WorkspaceWrite,
    /// Commands run unconfined.
    DangerFullAccess,
}

impl From<SandboxMode> for troupe_runtime::tools::SandboxMode {
    fn from(mode: SandboxMode) -> Self {
        match mode {
            SandboxMode::ReadOnly => Self::ReadOnly,
            SandboxMode::WorkspaceWrite => Self::WorkspaceWrite,
            SandboxMode::DangerFullAccess => Self::DangerFullAccess,
        }
    }
}

/// What the Codex flags say, in troupe's terms.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CodexSettings {
    /// `--config openai_base_url=...`.
    pub base_url: Option<String>,
    /// `--config model=...`.
    pub model: Option<String>,
    /// `--sandbox` (wins) or `--config sandbox_mode=...`.
    pub sandbox: Option<troupe_runtime::tools::SandboxMode>,
    /// `--config sandbox_workspace_write.network_access=...`.
    pub network_access: Option<bool>,
    /// `--config model_reasoning_effort=...`.
    pub reasoning_effort: Option<troupe_runtime::provider::ReasoningEffort>,
    /// `--config approval_policy=...`.
    pub approval_policy: Option<troupe_protocol::ApprovalPolicy>,
    /// The keys and flags troupe has no setting for, in order.
    pub ignored: Vec<String>,
}

impl CodexSettings {
    /// The one warning line for what was ignored, if anything was.
    pub fn warning(&self) -> Option<String> {
        (!self.ignored.is_empty()).then(|| {
            format!(
                "troupe: ignoring Codex options troupe has no setting for: {} (docs/cli.md, the Codex-compatible command line)",
                self.ignored.join(", ")
            )
        })
    }
}

/// Maps the Codex flags; bad values are bad input (exit 2).
pub fn resolve(args: &CodexArgs) -> Result<CodexSettings, Failure> {
    let mut out = CodexSettings::default();
    if let Some(image) = args.image.first() {
        return Err(bad(format!(
            "--image {}: troupe sends text only; describe the image in the prompt instead",
            image.display()
        )));
    }
    for raw in &args.config {
        let (key, value) = parse_override(raw)?;
        match key.as_str() {
            "openai_base_url" => out.base_url = Some(string_value(&key, value)?),
            "model" => out.model = Some(string_value(&key, value)?),
            "model_reasoning_effort" => {
                let level = string_value(&key, value)?;
                let effort = crate::errors::reasoning_effort(&level)
                    .map_err(|e| bad(format!("--config model_reasoning_effort: {e}")))?;
                out.reasoning_effort = Some(effort);
            }
            "sandbox_mode" => {
                let mode = string_value(&key, value)?;
                let mode = SandboxMode::from_str(&mode, false).map_err(|_| {
                    bad(format!(
                        "--config sandbox_mode=\"{mode}\": expected read-only, workspace-write or danger-full-access"
                    ))
                })?;
                out.sandbox = Some(mode.into());
            }
            "sandbox_workspace_write.network_access" => match value {
                Value::Bool(on) => out.network_access = Some(on),
                other => {
                    return Err(bad(format!(
                        "--config {key}={other}: expected true or false"
                    )));
                }
            },
            "approval_policy" => {
                let name = string_value(&key, value)?;
                // Codex's deprecated `on-failure` (run sandboxed, ask to
                // escalate on failure) is troupe's `on-request`.
                let policy = match name.as_str() {
                    "on-failure" => Ok(troupe_protocol::ApprovalPolicy::OnRequest),
                    other => other.parse::<troupe_protocol::ApprovalPolicy>(),
                }
                .map_err(|e| bad(format!("--config approval_policy=\"{name}\": {e}")))?;
                out.approval_policy = Some(policy);
            }
            _ => out.ignored.push(format!("--config {key}")),
        }
    }
    if let Some(mode) = args.sandbox {
        out.sandbox = Some(mode.into());
    }
    if !args.add_dir.is_empty() {
        out.ignored.push("--add-dir".into());
    }
    if args.output_schema.is_some() {
        out.ignored.push("--output-schema".into());
    }
    Ok(out)
}

fn bad(message: String) -> Failure {
    Failure::bad_input(anyhow::anyhow!(message))
}

/// `KEY=VALUE` with VALUE in TOML; a VALUE that is not TOML is taken as a
/// bare string, as Codex does.
fn parse_override(raw: &str) -> Result<(String, Value), Failure> {
    let Some((key, value)) = raw.split_once('=') else {
        return Err(bad(format!(
            "--config {raw}: expected KEY=VALUE, e.g. --config model=\"gpt-5\""
        )));
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(bad(format!(
            "--config {raw}: the key is empty; expected KEY=VALUE"
        )));
    }
    let value = value.trim();
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|t| t.get("v").cloned())
        .and_then(|v| serde_json::to_value(v).ok())
        .unwrap_or_else(|| Value::String(value.to_string()));
    Ok((key.to_string(), parsed))
}

fn string_value(key: &str, value: Value) -> Result<String, Failure> {
    match value {
        Value::String(s) if !s.trim().is_empty() => Ok(s),
        other => Err(bad(format!(
            "--config {key}={other}: expected a non-empty string, e.g. --config {key}=\"...\""
        ))),
    }
}

/// Codex's usage object: troupe's counters plus Codex's names for them.
/// troupe does not count reasoning tokens apart (they are in
/// `output_tokens`), so `reasoning_output_tokens` is 0.
pub fn codex_usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "cached_input_tokens": u.cached_input_tokens,
        "cache_write_input_tokens": u.cache_creation_tokens,
        "cache_creation_tokens": u.cache_creation_tokens,
        "output_tokens": u.output_tokens,
        "reasoning_output_tokens": 0,
    })
}

/// stdout of `--experimental-json`: troupe's events with Codex's turn
/// granularity. A Codex turn is a whole run, so the stream is
/// `thread.started` (the root thread, once), one `turn.started`, the
/// items and troupe's other events as they come, then one
/// `turn.completed` whose usage is the sum of every model call of this
/// run (subagents included), or one `turn.failed`, just before the root
/// `thread.completed`. troupe's per-step `turn.*` events and the
/// subagents' `turn.failed` stay in events.jsonl only.
pub struct CodexStream<W: Write + Send> {
    out: W,
    root_thread: String,
    root_agent: Option<String>,
    opened: bool,
    /// The Codex turn was closed (turn.completed or turn.failed printed).
    closed: bool,
    failed: bool,
    usage: Usage,
    last_error: Option<String>,
}

impl<W: Write + Send> CodexStream<W> {
    /// A stream for the session whose root thread is `root_thread`.
    pub fn new(out: W, root_thread: impl Into<String>) -> Self {
        CodexStream {
            out,
            root_thread: root_thread.into(),
            root_agent: None,
            opened: false,
            closed: false,
            failed: false,
            usage: Usage::default(),
            last_error: None,
        }
    }

    fn line(&mut self, v: &Value) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, v)?;
        self.out.write_all(b"\n")
    }

    /// Is `v` from the root agent (or from no agent in particular)?
    fn is_root_event(&self, v: &Value) -> bool {
        match (v.get("agent_id").and_then(Value::as_str), &self.root_agent) {
            (None, _) => true,
            (Some(a), Some(root)) => a == root,
            (Some(a), None) => a.ends_with("/root"),
        }
    }

    /// The events that replace the root `thread.completed`'s turn: one
    /// turn.completed, or one turn.failed when none was printed yet.
    fn close_turn(&mut self, done: &Value) -> std::io::Result<()> {
        if std::mem::replace(&mut self.closed, true) || self.failed {
            return Ok(());
        }
        let subtype = done.get("subtype").and_then(Value::as_str).unwrap_or("");
        if subtype == "success" {
            let usage = codex_usage(&self.usage);
            return self.line(&json!({"type": "turn.completed", "usage": usage}));
        }
        let code = done
            .get("outcome_code")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut message = format!("the run ended with {subtype} ({code})");
        if let Some(e) = &self.last_error {
            message.push_str(": ");
            message.push_str(e);
        }
        self.failed = true;
        self.line(
            &json!({"type": "turn.failed", "message": message, "error": {"message": message}}),
        )
    }

    /// Writes `raw` (the event as troupe encoded it) when given, else `v`.
    fn pass(&mut self, v: &Value, raw: Option<&[u8]>) -> std::io::Result<()> {
        match raw {
            Some(raw) => {
                self.out.write_all(raw)?;
                self.out.write_all(b"\n")
            }
            None => self.line(v),
        }
    }

    fn event(&mut self, v: Value, raw: Option<&[u8]>) -> std::io::Result<()> {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        let root_thread = v.get("thread_id").and_then(Value::as_str) == Some(&self.root_thread);
        if !self.opened {
            self.opened = true;
            let started = json!({"type": "thread.started", "thread_id": self.root_thread});
            self.line(&started)?;
            self.line(&json!({"type": "turn.started"}))?;
        }
        match kind {
            "thread.started" if root_thread => {
                if let Some(agent) = v.get("agent_id").and_then(Value::as_str) {
                    self.root_agent = Some(agent.to_string());
                }
                Ok(())
            }
            "turn.started" => Ok(()),
            "turn.completed" => {
                if let Some(u) = v.get("usage")
                    && let Ok(u) = serde_json::from_value::<Usage>(u.clone())
                {
                    self.usage.add(&u);
                }
                Ok(())
            }
            "turn.failed" if self.is_root_event(&v) && !self.failed => {
                self.failed = true;
                self.pass(&v, raw)
            }
            "turn.failed" => Ok(()),
            "error" => {
                if self.is_root_event(&v) {
                    self.last_error = v.get("message").and_then(Value::as_str).map(String::from);
                }
                self.pass(&v, raw)
            }
            "thread.completed" if root_thread => {
                self.close_turn(&v)?;
                self.pass(&v, raw)
            }
            _ => self.pass(&v, raw),
        }
    }
}

impl<W: Write + Send> Exporter for CodexStream<W> {
    fn name(&self) -> &str {
        "stdout (Codex stream)"
    }

    fn export(&mut self, _line: &[u8], event: &[u8]) -> std::io::Result<()> {
        let v: Value = serde_json::from_slice(event)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        self.event(v, Some(event))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    /// A run that ended without its root `thread.completed` (the tree
    /// gave up) still ends its Codex turn, as failed.
    fn finish(&mut self) -> std::io::Result<()> {
        if self.opened && !self.closed && !self.failed {
            self.closed = true;
            let message = "the run ended without its thread.completed (see stderr)";
            self.line(
                &json!({"type": "turn.failed", "message": message, "error": {"message": message}}),
            )?;
        }
        self.out.flush()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn args(config: &[&str]) -> CodexArgs {
        CodexArgs {
            config: config.iter().map(|s| s.to_string()).collect(),
            ..CodexArgs::default()
        }
    }

    #[test]
    fn known_keys_map_and_the_others_are_listed_once() {
        let s = resolve(&args(&[
            "openai_base_url=\"http://127.0.0.1:9/v1\"",
            "model=\"m1\"",
            "approval_policy=\"never\"",
            "model_reasoning_effort=\"high\"",
            "web_search=\"live\"",
            "sandbox_workspace_write.network_access=true",
        ]))
        .unwrap();
        assert_eq!(s.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(s.model.as_deref(), Some("m1"));
        assert_eq!(s.network_access, Some(true));
        assert_eq!(
            s.reasoning_effort,
            Some(troupe_runtime::provider::ReasoningEffort::High)
        );
        assert_eq!(s.ignored, ["--config web_search"]);
        assert_eq!(s.warning().unwrap().lines().count(), 1);
    }

    #[test]
    fn bad_overrides_are_bad_input() {
        for bad in [
            "no-equals",
            "=1",
            "model=3",
            "sandbox_mode=\"full\"",
            "sandbox_workspace_write.network_access=\"yes\"",
        ] {
            let e = resolve(&args(&[bad])).unwrap_err();
            assert_eq!(e.code, crate::failure::exit::BAD_INPUT, "{bad}");
        }
        let s = resolve(&args(&["sandbox_mode=\"read-only\""])).unwrap();
        assert_eq!(
            s.sandbox,
            Some(troupe_runtime::tools::SandboxMode::ReadOnly)
        );
        // Not TOML: a bare string, as in Codex.
        let s = resolve(&args(&["model=gpt-5"])).unwrap();
        assert_eq!(s.model.as_deref(), Some("gpt-5"));
    }

    fn stream(events: &[Value]) -> Vec<Value> {
        let mut out = Vec::new();
        {
            let mut s = CodexStream::new(&mut out, "t1");
            for e in events {
                s.event(e.clone(), None).unwrap();
            }
        }
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn usage(i: u64, o: u64) -> Value {
        json!({"input_tokens": i, "cached_input_tokens": 1, "cache_creation_tokens": 0, "output_tokens": o})
    }

    #[test]
    fn one_turn_with_the_run_total() {
        let out = stream(&[
            json!({"type": "agent.started", "agent_id": "session"}),
            json!({"type": "thread.started", "thread_id": "t1", "agent_id": "session/root"}),
            json!({"type": "turn.started", "agent_id": "session/root"}),
            json!({"type": "turn.completed", "usage": usage(10, 2), "agent_id": "session/root"}),
            json!({"type": "turn.completed", "usage": usage(30, 5), "agent_id": "session/root/sub"}),
            json!({"type": "turn.failed", "message": "sub broke", "agent_id": "session/root/sub"}),
            json!({"type": "item.completed", "item": {"type": "agent_message", "text": "hi"}}),
            json!({"type": "thread.completed", "thread_id": "t1", "subtype": "success"}),
        ]);
        let types: Vec<&str> = out.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "thread.started",
                "turn.started",
                "agent.started",
                "item.completed",
                "turn.completed",
                "thread.completed"
            ]
        );
        assert_eq!(out[0]["thread_id"], "t1");
        assert_eq!(out[4]["usage"]["input_tokens"], 40);
        assert_eq!(out[4]["usage"]["cached_input_tokens"], 2);
        assert_eq!(out[4]["usage"]["output_tokens"], 7);
    }

    #[test]
    fn a_failed_run_has_one_turn_failed() {
        let out = stream(&[
            json!({"type": "thread.started", "thread_id": "t1", "agent_id": "session/root"}),
            json!({"type": "turn.failed", "message": "boom", "error": {"message": "boom"}, "agent_id": "session/root"}),
            json!({"type": "thread.completed", "thread_id": "t1", "subtype": "error_during_execution"}),
        ]);
        let failed: Vec<&Value> = out.iter().filter(|v| v["type"] == "turn.failed").collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0]["error"]["message"], "boom");
        assert!(!out.iter().any(|v| v["type"] == "turn.completed"));
        // A limit ends the run without a turn.failed of its own: one is made.
        let out = stream(&[
            json!({"type": "error", "message": "turn limit", "agent_id": "session/root"}),
            json!({"type": "thread.completed", "thread_id": "t1", "subtype": "error_max_turns", "outcome_code": "max_turns"}),
        ]);
        let failed: Vec<&Value> = out.iter().filter(|v| v["type"] == "turn.failed").collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(
            failed[0]["error"]["message"],
            "the run ended with error_max_turns (max_turns): turn limit"
        );
    }

    #[test]
    fn a_run_without_thread_completed_still_ends_its_turn_as_failed() {
        let mut out = Vec::new();
        {
            let mut s = CodexStream::new(&mut out, "t1");
            s.event(
                json!({"type": "turn.started", "agent_id": "session/root"}),
                None,
            )
            .unwrap();
            s.finish().unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["type"], "turn.failed");
        assert_eq!(text.matches("turn.failed").count(), 1);
    }
}
