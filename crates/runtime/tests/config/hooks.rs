//! Lifecycle hooks as real `sh -c` processes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_runtime::hooks::{
    HookCommand, HookCommandTable, HookConfig, HookEvent, HookRunner, HookSandbox,
    HookSandboxSetting, OUTPUT_LIMIT,
};
use troupe_runtime::tools::SandboxMode;

use crate::common::{load, load_err, workspace};

fn runner(dir: &Path, config: HookConfig) -> HookRunner {
    HookRunner::new(config, dir).with_session("sess-1", Some(dir.join("events.jsonl")))
}

fn pre_tool_use() -> HookEvent {
    HookEvent::PreToolUse {
        tool_name: "exec_command".into(),
        tool_input: json!({"command": "git push"}),
        tool_call_id: "call_7".into(),
    }
}

/// A hook that copies its stdin to `<dir>/<name>.json`.
fn capture(dir: &Path, name: &str) -> (String, PathBuf) {
    let path = dir.join(format!("{name}.json"));
    (format!("cat > '{}'", path.display()), path)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("the hook wrote its stdin");
    serde_json::from_str(&text).expect("stdin is one JSON object")
}

fn common_fields(payload: &Value, dir: &Path, event: &str) {
    assert_eq!(payload["hook_event_name"], event);
    assert_eq!(payload["session_id"], "sess-1");
    assert_eq!(payload["cwd"], dir.display().to_string());
    assert_eq!(
        payload["transcript_path"],
        dir.join("events.jsonl").display().to_string()
    );
}

#[tokio::test]
async fn pre_tool_use_gets_its_payload_on_stdin_and_runs_in_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, path) = capture(dir.path(), "pre");
    let config = HookConfig {
        pre_tool_use: vec![cmd.into(), "pwd > where.txt".into()],
        ..HookConfig::default()
    };
    let outcome = runner(dir.path(), config).run(pre_tool_use()).await;
    assert_eq!(outcome.blocked, None);
    assert_eq!(outcome.results.len(), 2);
    assert!(outcome.results.iter().all(|r| r.exit_code == Some(0)));
    let p = read_json(&path);
    common_fields(&p, dir.path(), "PreToolUse");
    assert_eq!(p["tool_name"], "exec_command");
    assert_eq!(p["tool_input"], json!({"command": "git push"}));
    assert_eq!(p["tool_call_id"], "call_7");
    let cwd = std::fs::read_to_string(dir.path().join("where.txt")).unwrap();
    assert_eq!(
        Path::new(cwd.trim()).canonicalize().unwrap(),
        dir.path().canonicalize().unwrap()
    );
}

#[tokio::test]
async fn exit_2_blocks_with_stderr_as_the_reason_and_stops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let config = HookConfig {
        pre_tool_use: vec![
            "cat >/dev/null; echo 'pushing is not allowed here' >&2; exit 2".into(),
            "touch after.txt".into(),
        ],
        ..HookConfig::default()
    };
    let outcome = runner(dir.path(), config).run(pre_tool_use()).await;
    assert_eq!(
        outcome.blocked.as_deref(),
        Some("pushing is not allowed here")
    );
    assert_eq!(outcome.results.len(), 1);
    assert_eq!(outcome.results[0].exit_code, Some(2));
    assert!(
        !dir.path().join("after.txt").exists(),
        "later hooks do not run"
    );
}

#[tokio::test]
async fn exit_2_without_stderr_still_blocks_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = HookConfig {
        pre_tool_use: vec!["exit 2".into()],
        ..HookConfig::default()
    };
    let outcome = runner(dir.path(), config).run(pre_tool_use()).await;
    assert_eq!(outcome.blocked.as_deref(), Some("blocked by hook `exit 2`"));
}

#[tokio::test]
async fn exit_0_and_1_do_not_block_and_output_is_captured() {
    let dir = tempfile::tempdir().unwrap();
    let config = HookConfig {
        pre_tool_use: vec![
            "echo fine".into(),
            "echo oops >&2; exit 1".into(),
            "touch ran.txt".into(),
        ],
        ..HookConfig::default()
    };
    let outcome = runner(dir.path(), config).run(pre_tool_use()).await;
    assert_eq!(outcome.blocked, None);
    let codes: Vec<_> = outcome.results.iter().map(|r| r.exit_code).collect();
    assert_eq!(codes, [Some(0), Some(1), Some(0)]);
    assert_eq!(outcome.results[0].stdout, "fine\n");
    assert_eq!(outcome.results[1].stderr, "oops\n");
    assert!(dir.path().join("ran.txt").exists());
}

#[tokio::test]
async fn exit_2_blocks_nothing_outside_pre_tool_use() {
    let dir = tempfile::tempdir().unwrap();
    let config = HookConfig {
        post_tool_use: vec!["echo no >&2; exit 2".into(), "touch second.txt".into()],
        ..HookConfig::default()
    };
    let event = HookEvent::PostToolUse {
        tool_name: "read_file".into(),
        tool_input: json!({}),
        tool_output: json!("x"),
        tool_call_id: "c".into(),
    };
    let outcome = runner(dir.path(), config).run(event).await;
    assert_eq!(outcome.blocked, None);
    assert_eq!(outcome.results.len(), 2);
    assert!(dir.path().join("second.txt").exists());
}

#[tokio::test]
async fn a_hook_past_its_timeout_is_killed_with_its_children_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let config = HookConfig {
        pre_tool_use: vec![
            format!("sleep 30 & echo $! > '{}'; wait", pidfile.display()).into(),
            "echo next".into(),
        ],
        timeout: Duration::from_millis(300),
        ..HookConfig::default()
    };
    let started = Instant::now();
    let outcome = runner(dir.path(), config).run(pre_tool_use()).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(outcome.blocked, None, "a timeout is not a block");
    assert!(outcome.results[0].timed_out);
    assert_eq!(outcome.results[0].exit_code, None);
    assert_eq!(
        outcome.results[1].stdout, "next\n",
        "the next hook still runs"
    );

    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The grandchild `sleep 30` was in the hook's process group.
    troupe_test_support::wait_until_blocking(
        &format!("sleep {pid} to die with the timed-out hook"),
        Duration::from_secs(5),
        || !Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid),
    )
    .unwrap();
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

#[tokio::test]
async fn a_plain_sleep_30_is_killed_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let config = HookConfig {
        stop: vec!["sleep 30".into()],
        timeout: Duration::from_millis(200),
        ..HookConfig::default()
    };
    let started = Instant::now();
    let event = HookEvent::Stop {
        subtype: "success".into(),
        result: None,
    };
    let outcome = runner(dir.path(), config).run(event).await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(outcome.results[0].timed_out);
}

#[tokio::test]
async fn a_hook_that_leaves_a_background_process_is_not_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let config = HookConfig {
        session_start: vec!["sleep 3 & echo started".into()],
        timeout: Duration::from_secs(10),
        ..HookConfig::default()
    };
    let started = Instant::now();
    let event = HookEvent::SessionStart {
        source: "startup".into(),
    };
    let outcome = runner(dir.path(), config).run(event).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(!outcome.results[0].timed_out);
    assert_eq!(outcome.results[0].exit_code, Some(0));
    assert_eq!(outcome.results[0].stdout, "started\n");
}

#[tokio::test]
async fn output_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let config = HookConfig {
        stop: vec!["head -c 1000000 /dev/zero | tr '\\0' x".into()],
        ..HookConfig::default()
    };
    let event = HookEvent::Stop {
        subtype: "success".into(),
        result: None,
    };
    let outcome = runner(dir.path(), config).run(event).await;
    assert_eq!(outcome.results[0].exit_code, Some(0));
    assert_eq!(outcome.results[0].stdout.len(), OUTPUT_LIMIT);
}

#[tokio::test]
async fn other_events_send_their_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let (start, start_path) = capture(dir.path(), "start");
    let (post, post_path) = capture(dir.path(), "post");
    let (stop, stop_path) = capture(dir.path(), "stop");
    let (compact, compact_path) = capture(dir.path(), "compact");
    let config = HookConfig {
        session_start: vec![start.into()],
        post_tool_use: vec![post.into()],
        stop: vec![stop.into()],
        pre_compact: vec![compact.into()],
        ..HookConfig::default()
    };
    let r = runner(dir.path(), config);
    r.run(HookEvent::SessionStart {
        source: "resume".into(),
    })
    .await;
    r.run(HookEvent::PostToolUse {
        tool_name: "grep".into(),
        tool_input: json!({"pattern": "fn main"}),
        tool_output: json!("src/main.rs:1"),
        tool_call_id: "call_9".into(),
    })
    .await;
    r.run(HookEvent::Stop {
        subtype: "success".into(),
        result: Some("done".into()),
    })
    .await;
    r.run(HookEvent::PreCompact {
        trigger: "auto".into(),
        mode: "local".into(),
        original_message_count: 40,
        compacted_message_count: 6,
        history_artifact_path: Some("derived/history-1.jsonl".into()),
    })
    .await;

    let p = read_json(&start_path);
    common_fields(&p, dir.path(), "SessionStart");
    assert_eq!(p["source"], "resume");

    let p = read_json(&post_path);
    common_fields(&p, dir.path(), "PostToolUse");
    assert_eq!(p["tool_name"], "grep");
    assert_eq!(p["tool_input"]["pattern"], "fn main");
    assert_eq!(p["tool_output"], "src/main.rs:1");
    assert_eq!(p["tool_call_id"], "call_9");

    let p = read_json(&stop_path);
    common_fields(&p, dir.path(), "Stop");
    assert_eq!(
        (p["subtype"].clone(), p["result"].clone()),
        (json!("success"), json!("done"))
    );

    let p = read_json(&compact_path);
    common_fields(&p, dir.path(), "PreCompact");
    assert_eq!(p["trigger"], "auto");
    assert_eq!(p["mode"], "local");
    assert_eq!(p["original_message_count"], 40);
    assert_eq!(p["compacted_message_count"], 6);
    assert_eq!(p["history_artifact_path"], "derived/history-1.jsonl");

    // The payload parses back into the event.
    let event: HookEvent = serde_json::from_value(p).unwrap();
    assert!(matches!(
        event,
        HookEvent::PreCompact {
            original_message_count: 40,
            ..
        }
    ));
}

#[test]
fn the_run_future_is_send() {
    fn send<T: Send>(_: T) {}
    let r = HookRunner::new(HookConfig::default(), "/");
    send(r.run(pre_tool_use()));
}

#[tokio::test]
async fn no_hooks_run_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let outcome = runner(dir.path(), HookConfig::default())
        .run(pre_tool_use())
        .await;
    assert_eq!(outcome.blocked, None);
    assert!(outcome.results.is_empty());
}

#[tokio::test]
async fn hooks_from_troupe_toml_run() {
    let dir = workspace(Some(
        "[hooks.lifecycle]\npre_tool_use = [\"echo 'denied by policy' >&2; exit 2\"]\ntimeout_ms = 5000\n",
    ));
    let config = load(dir.path(), &[]).unwrap();
    assert_eq!(config.hooks().timeout, Duration::from_secs(5));
    let outcome = HookRunner::new(config.hooks(), dir.path())
        .run(pre_tool_use())
        .await;
    assert_eq!(outcome.blocked.as_deref(), Some("denied by policy"));
}

#[test]
fn a_hook_entry_is_a_string_or_a_table_and_serializes_as_written() {
    let dir = workspace(Some(
        "[hooks.lifecycle]\nsession_start = [\"a.sh\", { command = \"b.sh\", sandbox = \"none\" }]\n\n\
         [[hooks.lifecycle.pre_tool_use]]\ncommand = \"guard.sh\"\nsandbox = \"none\"\n\n\
         [[hooks.lifecycle.pre_tool_use]]\ncommand = \"audit.sh\"\n",
    ));
    let config = load(dir.path(), &[]).unwrap();
    let l = &config.hooks.lifecycle;
    let none = |c: &str| {
        HookCommand::Table(HookCommandTable {
            command: c.into(),
            sandbox: HookSandboxSetting::Unconfined,
        })
    };
    assert_eq!(l.session_start, [HookCommand::from("a.sh"), none("b.sh")]);
    assert_eq!(
        l.pre_tool_use,
        [
            none("guard.sh"),
            HookCommand::Table(HookCommandTable {
                command: "audit.sh".into(),
                sandbox: HookSandboxSetting::Agent,
            })
        ]
    );
    assert!(l.pre_tool_use[0].unconfined() && !l.pre_tool_use[1].unconfined());
    assert_eq!(config.hooks().session_start, l.session_start);
    // The JSON the workspace-trust hash reads.
    assert_eq!(
        serde_json::to_value(&config.hooks).unwrap()["lifecycle"]["session_start"],
        json!(["a.sh", {"command": "b.sh", "sandbox": "none"}])
    );
}

#[test]
fn a_bad_hook_table_names_the_key() {
    for (text, expect) in [
        (
            "[[hooks.lifecycle.stop]]\ncommand = \"x\"\nsandbox = \"off\"\n",
            "valid values: agent, none",
        ),
        (
            "[[hooks.lifecycle.stop]]\ncommand = \"x\"\nsandbx = \"none\"\n",
            "sandbx",
        ),
        ("[[hooks.lifecycle.stop]]\nsandbox = \"none\"\n", "command"),
        ("[hooks.lifecycle]\nstop = [3]\n", "a command string"),
    ] {
        let e = load_err(text).to_string();
        assert!(e.contains("hooks.lifecycle.stop"), "{text}: {e}");
        assert!(e.contains(expect), "{text}: {e}");
    }
}

/// A hook writing into the workspace and into a directory outside it,
/// under `mode`, as a string entry and as `sandbox = "none"`.
async fn outside_writes(mode: SandboxMode) -> (bool, bool, bool) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let config = HookConfig {
        session_start: vec![
            format!("echo x > '{}/default.txt'", outside.display()).into(),
            HookCommand::Table(HookCommandTable {
                command: format!("echo x > '{}/none.txt'", outside.display()),
                sandbox: HookSandboxSetting::Unconfined,
            }),
            "echo ok > inside.txt".into(),
        ],
        ..HookConfig::default()
    };
    let runner = HookRunner::new(config, &ws).with_sandbox(HookSandbox {
        mode,
        network_access: false,
        scratch_root: Some(tmp.path().to_path_buf()),
    });
    let outcome = runner
        .run(HookEvent::SessionStart {
            source: "startup".into(),
        })
        .await;
    assert_eq!(outcome.results.len(), 3, "{outcome:?}");
    assert!(
        outcome.results.iter().all(|r| r.error.is_none()),
        "{outcome:?}"
    );
    // Each hook's scratch directory is gone.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("scratch"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    (
        outside.join("default.txt").exists(),
        outside.join("none.txt").exists(),
        ws.join("inside.txt").exists(),
    )
}

#[tokio::test]
async fn hooks_run_in_the_sessions_sandbox_unless_they_say_none() {
    // workspace-write: the string entry cannot write outside, `none` can,
    // and writing in the workspace works.
    assert_eq!(
        outside_writes(SandboxMode::WorkspaceWrite).await,
        (false, true, true)
    );
    // read-only: not even the workspace.
    assert_eq!(
        outside_writes(SandboxMode::ReadOnly).await,
        (false, true, false)
    );
    // danger-full-access: everything, as before.
    assert_eq!(
        outside_writes(SandboxMode::DangerFullAccess).await,
        (true, true, true)
    );
}
