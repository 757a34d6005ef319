//! What the examples share: where their model answers, and why an agent
//! failed.
//!
//! - `OPENAI_BASE_URL` set: that OpenAI-compatible server (a local
//!   llama.cpp / vLLM / Ollama, or a hosted one), with `OPENAI_API_KEY` if
//!   it needs one.
//! - `OPENAI_API_KEY` set alone: OpenAI's hosted API.
//! - Neither: troupe's scripted model server (crates/testkit), started
//!   in-process on 127.0.0.1 and answering from the example's script: no
//!   key, nothing leaves the machine. The first line printed says so.

use std::path::Path;

use troupe_testkit::{Script, ScriptedServer};

/// The model the example talks to. Holds the scripted server (when it is
/// the one) for as long as the example runs.
pub struct Model {
    /// The OpenAI-compatible base URL.
    pub base_url: String,
    /// The model name.
    pub model: String,
    _server: Option<ScriptedServer>,
}

/// Picks the model from the environment (see the module doc); `offline`
/// is the script the scripted server answers from when neither variable
/// is set.
pub async fn model(offline: impl FnOnce() -> Script) -> Result<Model, String> {
    let model = std::env::var("MODEL").unwrap_or_else(|_| "gpt-4.1-mini".into());
    let base_url = std::env::var("OPENAI_BASE_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let key = std::env::var("OPENAI_API_KEY")
        .ok()
        .filter(|k| !k.is_empty());
    match (base_url, key) {
        (Some(base_url), _) => Ok(Model {
            base_url,
            model,
            _server: None,
        }),
        (None, Some(_)) => Ok(Model {
            base_url: "https://api.openai.com/v1".to_string(),
            model,
            _server: None,
        }),
        (None, None) => {
            let server = ScriptedServer::start(offline())
                .await
                .map_err(|e| format!("the scripted model server did not start: {e}"))?;
            let base_url = server.openai_base_url();
            println!(
                "offline: neither OPENAI_API_KEY nor OPENAI_BASE_URL is set, so troupe's scripted model server answers at {base_url} (set OPENAI_BASE_URL for a local or other server, OPENAI_API_KEY for OpenAI)"
            );
            Ok(Model {
                base_url,
                model,
                _server: Some(server),
            })
        }
    }
}

/// Why agent `agent_id` failed, from the session's canonical log
/// (`events.jsonl`): the message of its last `turn.failed`, or of the last
/// `error` event, if any.
pub fn failure_reason(session_dir: &Path, agent_id: &str) -> Option<String> {
    let text = std::fs::read_to_string(session_dir.join("events.jsonl")).ok()?;
    let mut reason = None;
    for line in text.lines() {
        let Ok(line) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let event = line.get("event").unwrap_or(&line);
        let ty = event.get("type").and_then(|t| t.as_str());
        let ours = event.get("agent_id").and_then(|a| a.as_str()) == Some(agent_id);
        let message = event.get("message").and_then(|m| m.as_str());
        match (ty, message) {
            (Some("turn.failed"), Some(m)) if ours => reason = Some(m.to_string()),
            (Some("error"), Some(m)) if reason.is_none() => reason = Some(m.to_string()),
            _ => {}
        }
    }
    reason
}
