//! `troupe exec` under its policies: path escapes, deny rules and policy,
//! pre-tool-use hooks, key variables kept from commands.

use serde_json::json;
use troupe_protocol::{ItemStatus, ToolOutcome};
use troupe_testkit::{Reply, ToolCallSpec};

use super::assert_exit;
use super::exec::{Server, exec, exec_cmd, session_dir};

#[test]
fn path_escapes_are_refused() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("link")).unwrap();
    let s = Server::start(vec![
        troupe_test_support::scripts::escape_attempts(outside.path()),
        Reply::text("ok"),
    ]);
    let run = exec(ws.path(), &s, &[], "escape");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let outputs = run.outputs();
    assert_eq!(outputs.len(), 4);
    for (id, status, text) in &outputs {
        assert_eq!(*status, ItemStatus::Failed, "{id}: {text}");
        assert!(text.contains("outside the workspace"), "{id}: {text}");
        assert!(!text.contains("top secret"), "{id} leaked the file");
    }
    assert!(
        !outside.path().join("new.txt").exists(),
        "wrote through the symlink"
    );
}

#[test]
fn deny_policy_declines_calls() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[permissions]\ndeny = [\"exec_command(rm *)\", \"write_file\"]\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    std::fs::write(ws.path().join("keep.txt"), "keep").unwrap();
    let s = Server::start(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new("rm", "exec_command", json!({"command": "rm keep.txt"})),
            ToolCallSpec::new("w", "write_file", json!({"path": "x.txt", "content": "x"})),
            ToolCallSpec::new("ok", "exec_command", json!({"command": "echo allowed"})),
        ]),
        Reply::text("ok"),
    ]);
    let run = exec(ws.path(), &s, &[], "deny");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(ws.path().join("keep.txt").exists());
    assert!(!ws.path().join("x.txt").exists());
    let outputs = run.outputs();
    assert_eq!(outputs[0].1, ItemStatus::Failed, "{:?}", outputs[0]);
    assert_eq!(outputs[1].1, ItemStatus::Failed, "{:?}", outputs[1]);
    assert_eq!(run.outcome("rm"), Some(ToolOutcome::PermissionRejected));
    assert_eq!(run.outcome("w"), Some(ToolOutcome::PermissionRejected));
    assert_eq!(run.outcome("ok"), Some(ToolOutcome::Success));
    assert_eq!(outputs[2].1, ItemStatus::Completed, "{:?}", outputs[2]);
    assert!(outputs[0].2.contains("denied"), "{:?}", outputs[0]);
}

#[test]
fn a_pre_tool_use_hook_exiting_2_blocks_the_call() {
    let ws = tempfile::tempdir().unwrap();
    let hook = ws.path().join("guard.sh");
    std::fs::write(
        &hook,
        "#!/bin/sh\ncat > \"$(dirname \"$0\")/hook-input.json\"\necho 'writes are frozen' >&2\nexit 2\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        format!(
            "[hooks.lifecycle]\npre_tool_use = [\"{}\"]\n",
            hook.display()
        ),
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let s = Server::start(vec![
        Reply::tool_call("w", "write_file", json!({"path": "x.txt", "content": "x"})),
        Reply::text("ok"),
    ]);
    let run = exec(ws.path(), &s, &[], "write");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!ws.path().join("x.txt").exists(), "the blocked call ran");
    let outputs = run.outputs();
    assert_eq!(outputs[0].1, ItemStatus::Failed);
    assert_eq!(run.outcome("w"), Some(ToolOutcome::HookDenied));
    assert!(
        outputs[0].2.contains("writes are frozen"),
        "{:?}",
        outputs[0]
    );
    let input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("hook-input.json")).unwrap())
            .unwrap();
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "write_file");
    assert!(
        s.server.requests()[1]
            .function_call_output_text("w")
            .unwrap()
            .contains("writes are frozen")
    );
}

#[test]
fn deny_rules_match_every_spelling_of_a_path() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("secrets")).unwrap();
    std::fs::create_dir_all(ws.path().join("sub")).unwrap();
    std::fs::write(ws.path().join("secrets/key"), "k").unwrap();
    std::os::unix::fs::symlink("../secrets", ws.path().join("sub/sl")).unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[permissions]\ndeny = [\"write_file(secrets/*)\", \"read_file(secrets/*)\"]\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let abs = ws.path().join("secrets/d");
    let s = Server::start(vec![
        Reply::tool_calls(vec![
            ToolCallSpec::new(
                "a",
                "write_file",
                json!({"path": "./secrets/b", "content": "x"}),
            ),
            ToolCallSpec::new(
                "b",
                "write_file",
                json!({"path": "sub/../secrets/c", "content": "x"}),
            ),
            ToolCallSpec::new("c", "write_file", json!({"path": abs, "content": "x"})),
            ToolCallSpec::new("d", "read_file", json!({"path": "sub/sl/key"})),
        ]),
        Reply::text("ok"),
    ]);
    let run = exec(ws.path(), &s, &[], "sneak");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    for (id, status, text) in run.outputs() {
        assert_eq!(status, ItemStatus::Failed, "{id}: {text}");
        assert_eq!(
            run.outcome(&id),
            Some(ToolOutcome::PermissionRejected),
            "{id}: {text}"
        );
    }
    for f in ["b", "c", "d"] {
        assert!(
            !ws.path().join("secrets").join(f).exists(),
            "secrets/{f} was written"
        );
    }
}

#[test]
fn configured_key_variables_never_reach_commands() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[providers.corp]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"CORP_LLM_CRED\"\n",
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let s = Server::start(vec![
        Reply::tool_call(
            "e",
            "exec_command",
            json!({"command": "env | grep CRED || echo none"}),
        ),
        Reply::text("ok"),
    ]);
    let out = exec_cmd(ws.path(), &s.url(), &[], "leak?")
        .env("CORP_LLM_CRED", "sk-very-secret-123")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let log = std::fs::read_to_string(session_dir(ws.path()).join("events.jsonl")).unwrap();
    assert!(
        !log.contains("sk-very-secret-123"),
        "the key reached a command's output"
    );
    assert!(
        s.server.requests()[1]
            .function_call_output_text("e")
            .unwrap()
            .contains("none")
    );
}
