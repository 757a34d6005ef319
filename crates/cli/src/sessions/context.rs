//! `troupe sessions compact` and `troupe sessions fork` (docs/context.md).

use std::io::Write;
use std::path::Path;

use troupe_protocol::{ThreadEvent, ThreadStartedEvent, UserMessageEvent};
use troupe_runtime::config::Config;
use troupe_runtime::context::ContextSettings;
use troupe_runtime::context::history::{ForkArtifact, compact_stored, stored_messages};
use troupe_runtime::context::summary::read_memory;
use troupe_runtime::hooks::{HookEvent, HookRunner, HookSandbox};
use troupe_runtime::store::{SessionLog, SessionStatus, SessionStore};

use crate::failure::{Failure, exit, store_err};

/// The agent `troupe sessions resume` runs as the root.
const FORK_ROOT_AGENT: &str = "session/root";

/// Emits `events` into `log` with a writer of its own, then drains it.
fn append(log: &SessionLog, events: &[ThreadEvent]) -> Result<(), Failure> {
    let writer = log.start_writer(|_| {})?;
    for e in events {
        log.sender().emit(e)?;
    }
    log.close();
    writer.join()?;
    Ok(())
}

pub fn compact(ws: &Path, id: &str, tail_tokens: u64, json: bool) -> Result<u8, Failure> {
    let store = SessionStore::for_workspace(ws);
    let manifest = store.manifest(id).map_err(store_err)?;
    if manifest.status == SessionStatus::Active {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "session {id} is still active; compact it once it has ended (or resume it first)"
        )));
    }
    let config = Config::load(ws).map_err(Failure::bad_input)?;
    // The manual compaction runs the workspace's pre_compact hooks.
    crate::trust_cmd::ensure_loaded(
        &config,
        troupe_protocol::ApprovalPolicy::Never,
        &troupe_runtime::config::ConfigOverrides::default(),
    )?;
    let dir = store.session_dir(id).map_err(store_err)?;
    let settings = ContextSettings {
        continuity_tail_tokens: tail_tokens,
        ..ContextSettings::from_config(&config, ws, Some(dir.join("derived")))
    };
    let window = config
        .model_catalog()
        .get(&config.model())
        .and_then(|i| i.context_window);
    let mut out = crate::safe_text::Escaping::unless_json(std::io::stdout().lock(), json);
    // Claim the session before anything is written for it.
    let (log, _) = store.reopen(id, config.log_config()).map_err(store_err)?;
    let Some(c) = compact_stored(&dir, &manifest.root_thread_id, &settings, window)? else {
        writeln!(out, "nothing to compact in session {id}")?;
        return Ok(exit::OK);
    };
    // The pre_compact hooks run in the sandbox a run here would have.
    let mode = crate::sandbox_mode::resolve(config.sandbox_mode(), config.allow_unsandboxed)?;
    let hooks = HookRunner::new(config.hooks(), ws)
        .with_session(id, Some(dir.join("events.jsonl")))
        .with_sandbox(HookSandbox {
            mode,
            network_access: config.sandbox_workspace_write.network_access,
            scratch_root: None,
        });
    tokio::runtime::Runtime::new()?.block_on(hooks.run(HookEvent::PreCompact {
        trigger: "manual".into(),
        mode: "local".into(),
        original_message_count: c.event.original_message_count,
        compacted_message_count: c.event.compacted_message_count,
        history_artifact_path: c.event.history_artifact_path.clone(),
    }));
    let event = ThreadEvent::CompactBoundary(c.event.clone());
    append(&log, std::slice::from_ref(&event))?;
    if json {
        writeln!(out, "{}", serde_json::to_string(&event)?)?;
    } else {
        writeln!(
            out,
            "compacted session {id}: {} messages -> {}",
            c.event.original_message_count, c.event.compacted_message_count
        )?;
        if let Some(p) = &c.event.history_artifact_path {
            writeln!(out, "archive    {p}")?;
        }
        writeln!(out, "compacted  {}", c.compacted_path)?;
    }
    Ok(exit::OK)
}

pub fn fork(ws: &Path, id: &str, json: bool) -> Result<u8, Failure> {
    let store = SessionStore::for_workspace(ws);
    let manifest = store.manifest(id).map_err(store_err)?;
    let config = Config::load(ws).map_err(Failure::bad_input)?;
    let source = store.session_dir(id).map_err(store_err)?;
    let messages = stored_messages(&source, &manifest.root_thread_id)?;
    let artifact = ForkArtifact::build(id, &messages, read_memory(ws).as_deref());
    let new_id = SessionStore::new_session_id();
    let log = store
        .create(&new_id, config.log_config())
        .map_err(store_err)?;
    let derived = log.dir().join("derived");
    std::fs::create_dir_all(&derived)?;
    let artifact_path = derived.join("fork.json");
    troupe_runtime::fsutil::write_atomic(&artifact_path, &serde_json::to_vec_pretty(&artifact)?)?;
    // The forked session resumes with the settings of its source.
    let settings = source.join("settings.json");
    if settings.is_file() {
        std::fs::copy(&settings, log.dir().join("settings.json"))?;
    }
    // The fork is owned by the root agent that `sessions resume` starts,
    // so its resume rebuilds these messages.
    let root = Some(FORK_ROOT_AGENT.to_string());
    let mut events = vec![ThreadEvent::ThreadStarted(ThreadStartedEvent {
        thread_id: new_id.clone(),
        session_id: Some(new_id.clone()),
        agent_id: root.clone(),
    })];
    for (i, m) in artifact.messages().into_iter().enumerate() {
        if let troupe_runtime::provider::Message::User { content } = m {
            events.push(ThreadEvent::UserMessage(UserMessageEvent {
                id: format!("item_{}", i + 1),
                text: content,
                intent_id: None,
                agent_id: root.clone(),
            }));
        }
    }
    append(&log, &events)?;
    let mut out = crate::safe_text::Escaping::unless_json(std::io::stdout().lock(), json);
    let shown = artifact_path
        .strip_prefix(ws)
        .unwrap_or(&artifact_path)
        .display()
        .to_string();
    if json {
        let v = serde_json::json!({"source": id, "session_id": new_id, "artifact": shown});
        writeln!(out, "{v}")?;
    } else {
        writeln!(out, "forked session {id} into {new_id}")?;
        writeln!(out, "artifact {shown}")?;
    }
    Ok(exit::OK)
}
