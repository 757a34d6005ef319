//! `sandbox_mode` through the real binary: a hostile scripted model's
//! `exec_command` calls write outside the workspace, into `.git/config`
//! and `.vtcode/`, create `troupe.toml`, connect to a TCP listener on
//! 127.0.0.1 and send a UDP datagram; per mode,
//! what is refused and what works, on real files and processes.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use troupe_protocol::{CommandExecutionItem, ItemDetails, ThreadEvent};
use troupe_testkit::{Reply, Script};

use super::assert_exit;
use super::exec::{bin, session_events};
use super::session_id;
use super::write_vtcode_pipeline;

/// A listener on 127.0.0.1 counting the connections it accepted.
fn listener() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    (port, n)
}

pub(super) struct Case {
    _tmp: tempfile::TempDir,
    pub(super) ws: PathBuf,
    pub(super) outside: PathBuf,
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Case {
    pub(super) fn new() -> Case {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let ws = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
        let (port, accepted) = listener();
        Case {
            _tmp: tmp,
            ws,
            outside,
            port,
            accepted,
        }
    }

    /// The hostile commands, by name.
    fn attacks(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "outside",
                format!("echo x > {}/escape.txt", self.outside.display()),
            ),
            (
                "git",
                "echo '[core] fsmonitor = touch pwned' >> .git/config".into(),
            ),
            ("vtcode", "echo forged > .vtcode/forged.txt".into()),
            (
                "connect",
                format!(
                    "/usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {}), 5)'",
                    self.port
                ),
            ),
            // A datagram needs no listener to be sent (tests/e2e/network.rs
            // checks what arrives).
            (
                "udp",
                format!(
                    "/usr/bin/python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.1\", {}))'",
                    self.port
                ),
            ),
            // Absent: troupe's placeholder stops it (tests/e2e/sandbox_names.rs).
            ("toml", "echo '[hooks]' > troupe.toml".into()),
        ]
    }

    /// The commands that must work in workspace-write.
    fn benign() -> Vec<(&'static str, String)> {
        vec![
            ("inside", "mkdir -p src && echo ok > src/inside.txt".into()),
            (
                "tmpdir",
                "echo t > \"$TMPDIR/t.txt\" && cat \"$TMPDIR/t.txt\"".into(),
            ),
            // The spool is under `.vtcode/`, read-only to the command: it
            // still writes its own output, also reopened.
            (
                "stdout",
                "echo spooled > /dev/stdout && echo err > /dev/stderr".into(),
            ),
        ]
    }

    /// `troupe exec` with `args`, the model running `commands` then
    /// `extra` calls, then answering; the exit code and every command's
    /// item by name.
    pub(super) fn exec(
        &self,
        args: &[&str],
        commands: &[(&'static str, String)],
        extra: Vec<Reply>,
    ) -> (Option<i32>, String, Vec<(String, CommandExecutionItem)>) {
        self.exec_as(None, args, commands, extra)
    }

    /// [`Case::exec`], troupe started as `uid` (through `setpriv`) when
    /// given, the whole case directory handed to that user first.
    fn exec_as(
        &self,
        uid: Option<u32>,
        args: &[&str],
        commands: &[(&'static str, String)],
        extra: Vec<Reply>,
    ) -> (Option<i32>, String, Vec<(String, CommandExecutionItem)>) {
        let mut replies: Vec<Reply> = commands
            .iter()
            .map(|(name, c)| {
                let args = json!({"command": c, "timeout_ms": 180_000});
                Reply::tool_call(*name, "exec_command", args)
            })
            .collect();
        replies.extend(extra);
        replies.push(Reply::text("done"));
        let script = self.ws.parent().unwrap().join("script.json");
        let text = serde_json::to_string(&Script::replies(replies)).unwrap();
        std::fs::write(&script, text).unwrap();
        let mut cmd = match uid {
            Some(uid) => {
                let base = self.ws.parent().unwrap();
                let chown = Command::new("chown")
                    .arg("-R")
                    .arg(format!("{uid}:{uid}"))
                    .arg(base)
                    .status()
                    .unwrap();
                assert!(chown.success());
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={uid}"))
                    .arg("--clear-groups")
                    .arg(bin())
                    .env("HOME", base)
                    .env("TMPDIR", base)
                    .env("PATH", "/usr/local/bin:/usr/bin:/bin");
                c
            }
            None => {
                let mut c = Command::new(bin());
                troupe_test_support::trust::isolated(&mut c);
                c
            }
        };
        let out = cmd
            .arg("exec")
            .arg("--script")
            .arg(&script)
            .arg("--workspace")
            .arg(&self.ws)
            .args(args)
            .arg("--json")
            .arg("be hostile")
            .env("TROUPE_LOG", "warn")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let items = commands_of(&session_events(&self.ws), commands);
        (out.status.code(), stdout, items)
    }
}

/// The command items whose command is one of `commands`, by name.
pub(super) fn commands_of(
    events: &[ThreadEvent],
    commands: &[(&'static str, String)],
) -> Vec<(String, CommandExecutionItem)> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::CommandExecution(c) => commands
                    .iter()
                    .find(|(_, cmd)| *cmd == c.command)
                    .map(|(name, _)| (name.to_string(), c.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

impl Case {
    /// Runs every attack and every benign command in one `troupe exec` (as
    /// user `uid`, or this one): the run succeeds, every attack fails and
    /// every benign command works.
    fn every_escape_refused_as(&self, uid: Option<u32>) {
        let mut commands = self.attacks();
        commands.extend(Case::benign());
        let (code, stdout, items) = self.exec_as(uid, &[], &commands, vec![]);
        assert_eq!(code, Some(0), "{stdout}");
        for (name, _) in self.attacks() {
            assert_ne!(
                exit_of(&items, name),
                Some(0),
                "`{name}` succeeded: {items:?}"
            );
        }
        for (name, _) in Case::benign() {
            assert_eq!(exit_of(&items, name), Some(0), "`{name}` failed: {items:?}");
        }
    }
}

pub(super) fn exit_of(items: &[(String, CommandExecutionItem)], name: &str) -> Option<i32> {
    items
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("`{name}` did not run: {items:?}"))
        .1
        .exit_code
}

fn settings(ws: &Path) -> Value {
    let dir = troupe_test_support::e2e::session_dir(ws);
    serde_json::from_slice(&std::fs::read(dir.join("settings.json")).unwrap()).unwrap()
}

#[test]
fn workspace_write_is_exec_s_default_and_refuses_every_escape() {
    let case = Case::new();
    case.every_escape_refused_as(None);
    assert!(!case.outside.join("escape.txt").exists());
    assert_eq!(
        std::fs::read_to_string(case.ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!case.ws.join(".vtcode/forged.txt").exists());
    assert!(!case.ws.join("troupe.toml").exists());
    assert_eq!(case.accepted.load(Ordering::SeqCst), 0);
    assert_eq!(
        std::fs::read_to_string(case.ws.join("src/inside.txt")).unwrap(),
        "ok\n"
    );
    // Recorded for a resume.
    assert_eq!(settings(&case.ws)["sandbox"], "workspace-write");
}

/// As an ordinary user (nobody, no `CAP_SYS_ADMIN`): the mount namespace
/// comes with an unprivileged user namespace. Needs root to switch user.
#[test]
#[ignore = "needs root"]
fn workspace_write_holds_for_an_ordinary_user_too() {
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(
        std::fs::metadata("/proc/self").unwrap().uid(),
        0,
        "needs root to run troupe as another user"
    );
    let case = Case::new();
    case.every_escape_refused_as(Some(65534));
    assert_eq!(
        std::fs::read_to_string(case.ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!case.outside.join("escape.txt").exists());
    assert!(!case.ws.join("troupe.toml").exists());
    assert_eq!(case.accepted.load(Ordering::SeqCst), 0);
}

#[test]
fn danger_full_access_lets_the_same_commands_through() {
    let case = Case::new();
    let (code, stdout, items) = case.exec(
        &["--sandbox", "danger-full-access"],
        &case.attacks(),
        vec![],
    );
    assert_eq!(code, Some(0), "{stdout}");
    for (name, _) in case.attacks() {
        assert_eq!(exit_of(&items, name), Some(0), "`{name}` failed: {items:?}");
    }
    assert!(case.outside.join("escape.txt").exists());
    assert!(
        std::fs::read_to_string(case.ws.join(".git/config"))
            .unwrap()
            .contains("fsmonitor")
    );
    assert!(case.ws.join(".vtcode/forged.txt").exists());
    assert!(case.ws.join("troupe.toml").exists());
    assert_eq!(case.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(settings(&case.ws)["sandbox"], "danger-full-access");
}

#[test]
fn network_access_opens_tcp_in_workspace_write() {
    let case = Case::new();
    let connect: Vec<_> = case
        .attacks()
        .into_iter()
        .filter(|(n, _)| *n == "connect")
        .collect();
    let (code, stdout, items) = case.exec(
        &["--config", "sandbox_workspace_write.network_access=true"],
        &connect,
        vec![],
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(exit_of(&items, "connect"), Some(0), "{items:?}");
    assert_eq!(case.accepted.load(Ordering::SeqCst), 1);
}

#[test]
fn read_only_refuses_every_write_write_file_included() {
    let case = Case::new();
    std::fs::write(case.ws.join("README"), "hello\n").unwrap();
    let commands = vec![
        ("read", "cat README".to_string()),
        ("inside", "echo x > inside.txt".to_string()),
        ("edit", "echo x >> README".to_string()),
        (
            "tmpdir",
            "echo t > \"$TMPDIR/t.txt\" && cat \"$TMPDIR/t.txt\"".to_string(),
        ),
    ];
    let write = Reply::tool_call(
        "w",
        "write_file",
        json!({"path": "written.txt", "content": "x"}),
    );
    let (code, stdout, items) = case.exec(&["-s", "read-only"], &commands, vec![write]);
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(exit_of(&items, "read"), Some(0), "{items:?}");
    assert_eq!(exit_of(&items, "tmpdir"), Some(0), "{items:?}");
    assert_ne!(exit_of(&items, "inside"), Some(0), "{items:?}");
    assert_ne!(exit_of(&items, "edit"), Some(0), "{items:?}");
    assert!(
        stdout.contains("write_file refused: this agent runs with sandbox_mode read-only"),
        "{stdout}"
    );
    assert!(!case.ws.join("inside.txt").exists() && !case.ws.join("written.txt").exists());
    assert_eq!(
        std::fs::read_to_string(case.ws.join("README")).unwrap(),
        "hello\n"
    );
}

#[test]
fn a_worktree_subagent_defaults_to_workspace_write_and_cannot_loosen_it() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap().join("repo");
    std::fs::create_dir_all(&ws).unwrap();
    troupe_test_support::git::repo_at(&ws, "initial", &[("README", "hello\n")]);
    let config_before = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    let main_git = ws.join(".git/config");
    let child = vec![
        Reply::tool_call(
            "c1",
            "exec_command",
            json!({"command": format!("echo '[core] fsmonitor = evil' >> {}", main_git.display())}),
        ),
        Reply::tool_call(
            "c2",
            "exec_command",
            json!({"command": "echo gitdir: /evil >> .git"}),
        ),
        Reply::tool_call(
            "c3",
            "exec_command",
            json!({"command": "echo made > made.txt"}),
        ),
        Reply::tool_call(
            "c4",
            "spawn_subagent",
            json!({"name": "loose", "task": "MARK-loose", "sandbox": "danger-full-access"}),
        ),
        Reply::tool_call(
            "c5",
            "handoff",
            json!({"state_summary": "tried", "boundary_status": [{"name": "t", "status": "done"}]}),
        ),
        Reply::text("child done"),
    ];
    let root = vec![
        Reply::tool_call(
            "r1",
            "spawn_subagent",
            json!({"name": "w", "task": "MARK-child: write things", "isolation": "worktree"}),
        ),
        Reply::text("root done"),
    ];
    let script = Script::replies(root).with_route("MARK-child", child);
    let path = tmp.path().join("script.json");
    std::fs::write(&path, serde_json::to_string(&script).unwrap()).unwrap();
    let out = Command::new(bin())
        .args([
            "exec",
            "--json",
            "--sandbox",
            "danger-full-access",
            "--script",
        ])
        .arg(&path)
        .arg("--workspace")
        .arg(&ws)
        .arg("delegate")
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let events = session_events(&ws);
    let commands = [
        (
            "main-git",
            format!("echo '[core] fsmonitor = evil' >> {}", main_git.display()),
        ),
        ("dot-git", "echo gitdir: /evil >> .git".to_string()),
        ("made", "echo made > made.txt".to_string()),
    ];
    let items = commands_of(&events, &commands);
    assert_ne!(exit_of(&items, "main-git"), Some(0), "{items:?}");
    assert_ne!(exit_of(&items, "dot-git"), Some(0), "{items:?}");
    assert_eq!(exit_of(&items, "made"), Some(0), "{items:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).unwrap(),
        config_before
    );
    assert!(
        stdout.contains(
            "sandbox `danger-full-access` is looser than this agent's own `workspace-write`"
        ),
        "{stdout}"
    );
    let started = |suffix: &str| {
        events.iter().any(|e| {
            matches!(e, ThreadEvent::ThreadStarted(t)
                if t.agent_id.as_deref().is_some_and(|a| a.ends_with(suffix)))
        })
    };
    assert!(started("/w"), "the worktree child ran");
    assert!(!started("/loose"), "the loose child never started");
    // The worktree's `.git` still points at the repository.
    for wt in std::fs::read_dir(ws.join(".vtcode/worktrees"))
        .unwrap()
        .flatten()
    {
        let dot_git = std::fs::read_to_string(wt.path().join(".git")).unwrap();
        assert!(!dot_git.contains("/evil"), "{dot_git}");
    }
}

/// `troupe run` with `pipeline`, the proposer (task "Fix calc.sh.")
/// playing `proposer` and an approving verifier; the exit code, stdout
/// and stderr, and the session's events.
fn pipeline(
    pipeline: &str,
    args: &[&str],
    proposer: Vec<Reply>,
) -> (Option<i32>, String, Vec<ThreadEvent>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let files = [
        ("calc.sh", "echo 5\n"),
        (".gitignore", "/.vtcode/\n/.vtcode-*\n"),
    ];
    troupe_test_support::git::repo_at(dir, "initial", &files);
    let verifier = vec![
        Reply::tool_call(
            "v1",
            "submit_verdict",
            json!({"approved": true, "checks": [{"command": "true", "exit_code": 0, "output_excerpt": ""}]}),
        ),
        Reply::text("approved"),
    ];
    let script = Script::replies(vec![])
        .with_route("MARK-pipe", verifier)
        .with_route("Fix calc.sh", proposer);
    let out = Command::new(bin())
        .args(write_vtcode_pipeline(dir, pipeline, &script))
        .arg("--workspace")
        .arg(dir)
        .args(args)
        .current_dir(dir)
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dir.join(".vtcode/sessions").is_dir(),
        "{:?}: {text}",
        out.status.code()
    );
    (out.status.code(), text, session_events(dir))
}

#[test]
fn a_pipeline_stage_can_be_stricter_but_never_looser() {
    let proposer = vec![
        Reply::tool_call("p1", "exec_command", json!({"command": "echo 4 > calc.sh"})),
        Reply::tool_call(
            "p2",
            "write_file",
            json!({"path": "calc.sh", "content": "echo 4\n"}),
        ),
        Reply::tool_call(
            "p3",
            "handoff",
            json!({"state_summary": "could not write (MARK-pipe)", "boundary_status": [{"name": "fix", "status": "blocked"}]}),
        ),
        Reply::text("blocked"),
    ];
    let strict =
        "[[proposers]]\nname = \"fixer\"\ntask = \"Fix calc.sh.\"\nsandbox = \"read-only\"\n";
    let (_, stdout, events) = pipeline(strict, &["--json"], proposer.clone());
    let commands = [("write", "echo 4 > calc.sh".to_string())];
    let items = commands_of(&events, &commands);
    assert_ne!(exit_of(&items, "write"), Some(0), "{items:?}");
    assert!(
        stdout.contains("write_file refused: this agent runs with sandbox_mode read-only"),
        "{stdout}"
    );
    // Looser than the session's read-only: the proposer never runs, and
    // the summary says why.
    let loose = "[[proposers]]\nname = \"fixer\"\ntask = \"Fix calc.sh.\"\nsandbox = \"danger-full-access\"\n";
    let (code, stdout, events) = pipeline(loose, &["--sandbox", "read-only"], proposer);
    assert_ne!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("sandbox `danger-full-access` is looser than this agent's own `read-only`"),
        "{stdout}"
    );
    assert!(commands_of(&events, &commands).is_empty());
}

#[test]
fn a_resume_re_applies_the_recorded_mode_unless_told_otherwise() {
    let case = Case::new();
    let commands = [("write", "echo x > a.txt".to_string())];
    let (code, stdout, items) = case.exec(&["--sandbox", "read-only"], &commands, vec![]);
    assert_eq!(code, Some(0), "{stdout}");
    assert_ne!(exit_of(&items, "write"), Some(0), "{items:?}");
    assert_eq!(settings(&case.ws)["sandbox"], "read-only");
    let id = session_id(&case.ws);
    let script = case.ws.parent().unwrap().join("script.json");
    let resume = |extra: &[&str]| {
        let out = Command::new(bin())
            .arg("exec")
            .arg("--script")
            .arg(&script)
            .arg("--workspace")
            .arg(&case.ws)
            .args(extra)
            .args(["--json", "resume", &id, "once more"])
            .env("TROUPE_LOG", "warn")
            .output()
            .unwrap();
        assert_exit(&out, 0);
    };
    // The same script again: the write runs again, still read-only.
    resume(&[]);
    assert!(!case.ws.join("a.txt").exists());
    assert_eq!(settings(&case.ws)["sandbox"], "read-only");
    // `--sandbox` on the resume replaces the recorded mode.
    resume(&["--sandbox", "workspace-write"]);
    assert_eq!(
        std::fs::read_to_string(case.ws.join("a.txt")).unwrap(),
        "x\n"
    );
    assert_eq!(settings(&case.ws)["sandbox"], "workspace-write");
}
