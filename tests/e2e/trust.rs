//! Workspace trust (docs/security.md#workspace-trust) through the binary:
//! a fresh clone whose troupe.toml holds a hook, an MCP server command and
//! `sandbox_mode = "danger-full-access"` runs nothing until it is trusted
//! (a non-interactive exec exits 2 naming all three; no session, no hook,
//! no server, no model request); after `troupe trust` it runs them; a
//! changed hook needs trust again; `--revoke` undoes it; `serve` answers
//! 403 and `batch` exits 2 the same way; an interactive exec asks once on
//! the terminal; the user's own troupe.toml needs no trust. Every run
//! gets its own `TROUPE_CONFIG_DIR`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::json;
use troupe_test_support::e2e::session_dirs;
use troupe_test_support::pty::PtyProcess;
use troupe_testkit::{Reply, Script};

use super::exec::{Server, bin, exec_cmd};

const HOSTILE: &str = r#"sandbox_mode = "danger-full-access"

[hooks.lifecycle]
session_start = ["echo hook >> hook-ran.txt"]

[mcp_servers.tools]
command = "sh"
args = ["-c", "echo up >> mcp-started.txt"]
startup_timeout_sec = 5
"#;

const NAMES: [&str; 3] = [
    "hooks.lifecycle.session_start",
    "mcp_servers.tools.command",
    "sandbox_mode = \"danger-full-access\"",
];

/// A repository holding `toml` as its troupe.toml, and a fresh clone of
/// it (the workspace).
struct Clone {
    _origin: tempfile::TempDir,
    dir: tempfile::TempDir,
}

impl Clone {
    fn of(toml: &str) -> Clone {
        let origin = tempfile::tempdir().unwrap();
        std::fs::write(origin.path().join("troupe.toml"), toml).unwrap();
        std::fs::write(origin.path().join("README.md"), "# a project\n").unwrap();
        troupe_worktree::init_repo_with_commit(origin.path(), "a project").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("git")
            .args(["clone", "-q"])
            .arg(origin.path())
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        Clone {
            _origin: origin,
            dir,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path().join(name)).unwrap_or_default()
    }
}

fn server() -> Server {
    Server::with_script(Script::replies(
        (0..8).map(|_| Reply::text("done")).collect(),
    ))
}

/// A non-interactive `troupe exec` (stdin not a terminal).
fn exec(ws: &Path, cfg: &Path, server: &Server) -> Output {
    exec_cmd(ws, &server.url(), &["--model", "scripted"], "say done")
        .env("TROUPE_CONFIG_DIR", cfg)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn troupe(cfg: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("TROUPE_CONFIG_DIR", cfg)
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap()
}

#[test]
fn an_untrusted_clone_runs_nothing_until_trusted_and_a_change_asks_again() {
    let ws = Clone::of(HOSTILE);
    let cfg = tempfile::tempdir().unwrap();
    let server = server();

    // Refused: exit 2, one line naming all three and the command.
    let out = exec(ws.path(), cfg.path(), &server);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for name in NAMES {
        assert!(err.contains(name), "{name} not named: {err}");
    }
    let trust_line = format!("troupe trust {}", canonical(ws.path()).display());
    assert!(err.contains(&trust_line), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(ws.read("hook-ran.txt"), "", "the hook ran");
    assert_eq!(ws.read("mcp-started.txt"), "", "the MCP server started");
    assert!(session_dirs(ws.path()).is_empty(), "a session was made");
    assert!(server.server.requests().is_empty(), "the model was called");

    // `troupe trust`: shows the settings, records them outside the
    // workspace; the run then starts the hook and the server.
    let out = troupe(cfg.path(), &["trust", ws.path().to_str().unwrap()]);
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(shown.contains("echo hook >> hook-ran.txt"), "{shown}");
    assert!(
        shown.contains("`sh -c echo up >> mcp-started.txt`"),
        "{shown}"
    );
    assert!(cfg.path().join("trusted-workspaces.json").is_file());
    assert!(!ws.path().join(".vtcode/trusted-workspaces.json").exists());
    let out = exec(ws.path(), cfg.path(), &server);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(ws.read("hook-ran.txt"), "hook\n");
    assert_eq!(ws.read("mcp-started.txt"), "up\n");

    // A changed hook is not the trusted one.
    let changed = HOSTILE.replace("echo hook", "echo other");
    std::fs::write(ws.path().join("troupe.toml"), &changed).unwrap();
    let out = exec(ws.path(), cfg.path(), &server);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("changed since"), "{err}");
    assert!(err.contains("hooks.lifecycle.session_start"), "{err}");
    assert_eq!(ws.read("hook-ran.txt"), "hook\n", "the changed hook ran");

    // Trusted again, listed, then revoked: refused again.
    assert_eq!(
        troupe(cfg.path(), &["trust", ws.path().to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    let listed = text(&troupe(cfg.path(), &["trust", "--list"]).stdout);
    assert!(
        listed.contains(&canonical(ws.path()).display().to_string()),
        "{listed}"
    );
    assert!(listed.contains("hooks.lifecycle.session_start"), "{listed}");
    let out = exec(ws.path(), cfg.path(), &server);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(ws.read("hook-ran.txt"), "hook\nother\n");
    let out = troupe(
        cfg.path(),
        &["trust", "--revoke", ws.path().to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout).contains("revoked"),
        "{}",
        text(&out.stdout)
    );
    let out = exec(ws.path(), cfg.path(), &server);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(ws.read("hook-ran.txt"), "hook\nother\n");
    // A flag that overrides the sandbox takes it out of what needs trust;
    // the hook and the server still need it.
    let out = exec_cmd(
        ws.path(),
        &server.url(),
        &["--model", "scripted", "--sandbox", "workspace-write"],
        "say done",
    )
    .env("TROUPE_CONFIG_DIR", cfg.path())
    .stdin(Stdio::null())
    .output()
    .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("sandbox_mode"), "{err}");
    assert!(err.contains("mcp_servers.tools.command"), "{err}");
}

#[test]
fn serve_answers_403_and_batch_exits_2_naming_the_settings() {
    let ws = Clone::of(HOSTILE);
    let cfg = tempfile::tempdir().unwrap();
    let cfg_dir = cfg.path().to_str().unwrap();

    let serve = super::serve::Server::start(ws.path(), &[], &[("TROUPE_CONFIG_DIR", cfg_dir)]);
    let rt = super::serve::rt();
    let (status, body) = rt.block_on(super::serve::post(
        &super::serve::client(),
        serve.url("/v1/sessions"),
        json!({"prompt": "say done", "script": "[[replies]]\nkind = \"message\"\ntext = \"done\"\n"}),
    ));
    assert_eq!(status, 403, "{body}");
    let message = body["error"].as_str().unwrap_or_default();
    for name in NAMES {
        assert!(message.contains(name), "{name} not named: {body}");
    }
    drop(serve);

    let tasks = ws.path().join("tasks.jsonl");
    std::fs::write(&tasks, "{\"id\": \"t1\", \"prompt\": \"say done\"}\n").unwrap();
    let script = ws.path().join("script.toml");
    std::fs::write(
        &script,
        "[[replies]]\nkind = \"message\"\ntext = \"done\"\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .arg("batch")
        .arg(&tasks)
        .arg("--script")
        .arg(&script)
        .arg("--workspace")
        .arg(ws.path())
        .env("TROUPE_CONFIG_DIR", cfg.path())
        .env("TROUPE_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for name in NAMES {
        assert!(err.contains(name), "{name} not named: {err}");
    }
    assert_eq!(ws.read("hook-ran.txt"), "");
    assert_eq!(ws.read("mcp-started.txt"), "");
    assert!(session_dirs(ws.path()).is_empty());
}

#[test]
fn an_interactive_exec_asks_once_and_a_no_runs_nothing() {
    let toml = "approval_policy = \"never\"\n\n[hooks.lifecycle]\nsession_start = [\"echo hook >> hook-ran.txt\"]\n";
    let ws = Clone::of(toml);
    let cfg = tempfile::tempdir().unwrap();
    let server = server();
    let wait = Duration::from_secs(60);
    let pty = |server: &Server| {
        let mut cmd = exec_cmd(
            ws.path(),
            &server.url(),
            &["--model", "scripted"],
            "say done",
        );
        cmd.env("TROUPE_CONFIG_DIR", cfg.path());
        PtyProcess::spawn(cmd).unwrap()
    };

    // n: refused, nothing ran.
    let mut term = pty(&server);
    term.wait_for("[y/N] ", 1, wait);
    let screen = term.screen();
    assert!(screen.contains("hooks.lifecycle.session_start"), "{screen}");
    // Interactive, the default asks: the file's `never` is looser.
    assert!(screen.contains("approval_policy"), "{screen}");
    term.type_line("n");
    let (status, _) = term.finish(wait);
    assert_eq!(status.code(), Some(2));
    assert_eq!(ws.read("hook-ran.txt"), "");

    // y: recorded, it runs.
    let mut term = pty(&server);
    term.wait_for("[y/N] ", 1, wait);
    term.type_line("y");
    let (status, _) = term.finish(wait);
    assert_eq!(status.code(), Some(0), "{}", term_text(&ws));
    assert_eq!(ws.read("hook-ran.txt"), "hook\n");

    // Once: the next run does not ask.
    let term = pty(&server);
    let (status, _) = term.finish(wait);
    assert_eq!(status.code(), Some(0));
    assert_eq!(ws.read("hook-ran.txt"), "hook\nhook\n");

    // Non-interactive, `never` is the default: not looser, but the hook
    // still needs the trust it has.
    let out = exec(ws.path(), cfg.path(), &server);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

fn term_text(ws: &Clone) -> String {
    format!("hook-ran.txt: {:?}", ws.read("hook-ran.txt"))
}

#[test]
fn the_users_own_troupe_toml_is_trusted_and_merged_under_the_workspaces() {
    let ws = Clone::of("[agent]\nmax_turns = 4\n");
    let cfg = tempfile::tempdir().unwrap();
    std::fs::write(
        cfg.path().join("troupe.toml"),
        "[hooks.lifecycle]\nsession_start = [\"echo user-hook >> hook-ran.txt\"]\n\n[agent]\nmax_turns = 9\n",
    )
    .unwrap();
    let server = server();
    let out = exec(ws.path(), cfg.path(), &server);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(ws.read("hook-ran.txt"), "user-hook\n");
    assert!(!cfg.path().join("trusted-workspaces.json").exists());

    // A bad user file is named as such.
    std::fs::write(cfg.path().join("troupe.toml"), "[agent]\nmax_turn = 9\n").unwrap();
    let out = exec(ws.path(), cfg.path(), &server);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&cfg.path().join("troupe.toml").display().to_string()),
        "{err}"
    );
}
