//! Helpers for tests of the built `troupe` binary: a scripted server on
//! its own runtime (for blocking tests), `troupe exec` runs, and the one
//! session a run leaves under its workspace.
//!
//! These are assertions: they panic with a message naming what failed.
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::time::Duration;

use troupe_protocol::{ItemStatus, ThreadCompletedEvent, ThreadEvent, ToolOutcome};
use troupe_testkit::{Reply, Script, ScriptedServer};

use crate::events;

/// A scripted server on its own runtime, alive while the value lives.
pub struct Server {
    /// The runtime serving it.
    pub _rt: tokio::runtime::Runtime,
    /// The server.
    pub server: ScriptedServer,
}

impl Server {
    /// Serves `replies`, in order.
    pub fn start(replies: Vec<Reply>) -> Server {
        Server::with_script(Script::replies(replies))
    }

    /// Serves `script`.
    pub fn with_script(script: Script) -> Server {
        Server::with_script_on(script, std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Serves `script` on `addr` (port 0: a free one); `0.0.0.0` serves
    /// the host ends of test namespaces' links too ([`Server::url_via`]).
    pub fn with_script_on(script: Script, addr: std::net::SocketAddr) -> Server {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the scripted server");
        let server = rt
            .block_on(ScriptedServer::start_on(script, addr))
            .expect("the scripted server starts");
        Server { _rt: rt, server }
    }

    /// Its OpenAI-style base URL (`http://127.0.0.1:PORT/v1`).
    pub fn url(&self) -> String {
        self.server.openai_base_url()
    }

    /// Its OpenAI-style base URL through another of the host's addresses
    /// (`http://IP:PORT/v1`, e.g. a namespace's gateway).
    pub fn url_via(&self, ip: impl Into<std::net::IpAddr>) -> String {
        let ip = ip.into();
        format!(
            "http://{}/v1",
            std::net::SocketAddr::new(ip, self.server.addr().port())
        )
    }
}

/// A finished `troupe exec` and the events its session logged.
pub struct Run {
    /// Exit code.
    pub code: Option<i32>,
    /// stdout.
    pub stdout: String,
    /// stderr.
    pub stderr: String,
    /// The session's canonical events.
    pub events: Vec<ThreadEvent>,
}

impl Run {
    /// The last `thread.completed` (panics, showing stderr, if none).
    pub fn completed(&self) -> &ThreadCompletedEvent {
        events::completed(&self.events)
            .unwrap_or_else(|| panic!("no thread.completed; stderr: {}", self.stderr))
    }

    /// Every tool output as (call id, status, output).
    pub fn outputs(&self) -> Vec<(String, ItemStatus, String)> {
        events::tool_outputs(&self.events)
            .into_iter()
            .map(|o| (o.call_id.clone(), o.status, o.output.clone()))
            .collect()
    }

    /// The status and output of the call `call_id` (panics, listing every
    /// output, when it has none).
    pub fn output_of(&self, call_id: &str) -> (ItemStatus, String) {
        let outputs = self.outputs();
        outputs
            .iter()
            .find(|(c, _, _)| c == call_id)
            .map(|(_, status, text)| (*status, text.clone()))
            .unwrap_or_else(|| panic!("no output for {call_id}: {outputs:?}"))
    }

    /// The outcome of the call `call_id`'s `tool_output`.
    pub fn outcome(&self, call_id: &str) -> Option<ToolOutcome> {
        events::tool_outputs(&self.events)
            .into_iter()
            .find(|o| o.call_id == call_id)
            .and_then(|o| o.outcome)
    }

    /// The messages of `error` events.
    pub fn errors(&self) -> Vec<String> {
        events::errors(&self.events)
    }
}

/// The one session directory under `ws` (panics unless there is exactly
/// one; a session still being staged under a dot-name is none).
pub fn session_dir(ws: &Path) -> PathBuf {
    let root = ws.join(".vtcode/sessions");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("no sessions under {}: {e}", root.display()))
        .filter_map(Result::ok)
        // A session being created is staged under a dot-name.
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "expected one session under {}",
        root.display()
    );
    dirs.remove(0)
}

/// The one session's canonical events under `ws` (every line must parse,
/// and pass the VT Code consumer).
pub fn session_events(ws: &Path) -> Vec<ThreadEvent> {
    log_events(&session_dir(ws))
}

/// The events of the session in `dir`, every line checked by the VT Code
/// consumer (lines of this build) and read as troupe reads them (older
/// schema versions upgraded).
pub fn log_events(dir: &Path) -> Vec<ThreadEvent> {
    let path = dir.join("events.jsonl");
    crate::vtcode::check_log(&path);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    events::parse_jsonl(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `troupe exec --workspace WS --base-url URL ARGS PROMPT` in `ws`, with
/// `TROUPE_LOG=warn` and no key or model from the caller's environment.
pub fn exec_command(bin: &Path, ws: &Path, url: &str, args: &[&str], prompt: &str) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("exec")
        .arg("--workspace")
        .arg(ws)
        .args(["--base-url", url])
        .args(args)
        .arg(prompt)
        .current_dir(ws)
        .env("TROUPE_LOG", "warn")
        .env("TROUPE_CONFIG_DIR", crate::trust::config_dir())
        .env_remove("OPENAI_API_KEY")
        .env_remove("TROUPE_MODEL")
        .env_remove("AGENT_MAX_TURNS_PER_REQUEST");
    cmd
}

/// `troupe run .vtcode-pipeline.toml ARGS --workspace WS` in `ws`, the
/// pipeline file `pipeline` written there first, with `TROUPE_LOG=warn`
/// and no key or model from the caller's environment; its output, whose
/// events the VT Code consumer read.
pub fn pipeline_run(bin: &Path, ws: &Path, pipeline: &str, args: &[&str]) -> Output {
    std::fs::write(ws.join(".vtcode-pipeline.toml"), pipeline).expect("the pipeline is written");
    let out = Command::new(bin)
        .args(["run", ".vtcode-pipeline.toml"])
        .args(args)
        .arg("--workspace")
        .arg(ws)
        .current_dir(ws)
        .env("TROUPE_LOG", "warn")
        .env("TROUPE_CONFIG_DIR", crate::trust::config_dir())
        .env_remove("OPENAI_API_KEY")
        .env_remove("TROUPE_MODEL")
        .output()
        .expect("troupe run runs");
    crate::vtcode::check_output(&out, "troupe run");
    out
}

/// Runs [`exec_command`] against `server` to its end.
pub fn exec_run(bin: &Path, ws: &Path, server: &Server, args: &[&str], prompt: &str) -> Run {
    let out = exec_command(bin, ws, &server.url(), args, prompt)
        .output()
        .expect("troupe exec runs");
    crate::vtcode::check_output(&out, "troupe exec");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        events: session_events(ws),
    }
}

/// The session directories under `ws` (none when the sessions directory
/// does not exist; sessions still being staged are left out).
pub fn session_dirs(ws: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(ws.join(".vtcode/sessions"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// How long [`sigkill_after_events`] waits for the session's events.
pub const SESSION_START_TIMEOUT: Duration = Duration::from_secs(60);

/// The complete lines of the only session's `events.jsonl` under `ws`
/// (0 before it exists).
pub fn event_lines(ws: &Path) -> usize {
    session_dirs(ws)
        .first()
        .and_then(|dir| std::fs::read(dir.join("events.jsonl")).ok())
        .map_or(0, |bytes| bytecount(&bytes))
}

fn bytecount(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| **b == b'\n').count()
}

/// SIGKILLs `child` (a `troupe` run in `ws`) once its session's log holds
/// at least `events` events, and waits for it; its exit status. The kill
/// point is an event of the run, not a duration, so it lands mid-run
/// whatever the machine's load (a little after the `events`th event: the
/// file is polled). A child that ends first (or logs fewer events within
/// [`SESSION_START_TIMEOUT`]) is waited for as it is.
pub fn sigkill_after_events(ws: &Path, child: &mut Child, events: usize) -> ExitStatus {
    let _ = crate::wait::wait_until_blocking("the session's events", SESSION_START_TIMEOUT, || {
        event_lines(ws) >= events || !matches!(child.try_wait(), Ok(None))
    });
    // SIGKILL; an error only says the child has ended already.
    let _ = child.kill();
    child.wait().expect("waiting for the killed troupe process")
}

/// `troupe exec` (binary `bin`) in `tmp/ws` on `prompt`, offline against
/// a script whose first model answer never comes (a ten-minute stall),
/// once its first `turn.started` is in the log: the running child, the
/// workspace and the session's directory. The caller kills the child.
pub fn stalled_exec(bin: &Path, tmp: &Path, prompt: &str) -> (Child, PathBuf, PathBuf) {
    let ws = tmp.join("ws");
    std::fs::create_dir(&ws).unwrap_or_else(|e| panic!("cannot create {}: {e}", ws.display()));
    let stall = write_script(
        tmp,
        "stall.toml",
        "[[replies]]\nkind = \"stall\"\nms = 600000\n",
    );
    let child = Command::new(bin)
        .arg("exec")
        .arg("--script")
        .arg(&stall)
        .arg(prompt)
        .current_dir(&ws)
        .env("TROUPE_LOG", "error")
        .env("TROUPE_CONFIG_DIR", crate::trust::config_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let dir = crate::wait::poll_for_blocking(
        "the first turn.started in the log",
        SESSION_START_TIMEOUT,
        || {
            let dir = session_dirs(&ws).pop()?;
            let log = std::fs::read_to_string(dir.join("events.jsonl")).ok()?;
            log.contains("\"turn.started\"").then_some(dir)
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    (child, ws, dir)
}

/// Writes a scripted-server script (`docs/scripted-server.md`, TOML) to
/// `dir/name` and returns its path.
pub fn write_script(dir: &Path, name: &str, toml: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, toml).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

/// `troupe exec --script SCRIPT --workspace WS ARGS PROMPT` run offline to
/// its end (`TROUPE_LOG=warn`); any JSON events on its stdout pass the
/// VT Code consumer.
pub fn exec_script(
    bin: &Path,
    ws: &Path,
    script: &Path,
    args: &[&str],
    prompt: &str,
) -> std::process::Output {
    let out = Command::new(bin)
        .arg("exec")
        .arg("--script")
        .arg(script)
        .arg("--workspace")
        .arg(ws)
        .args(args)
        .arg(prompt)
        .env("TROUPE_LOG", "warn")
        .env("TROUPE_CONFIG_DIR", crate::trust::config_dir())
        .output()
        .expect("troupe exec runs");
    crate::vtcode::check_output(&out, "troupe exec --script");
    out
}
