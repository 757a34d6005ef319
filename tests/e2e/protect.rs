//! A pipeline proposer's `protect` list through the built binary: its
//! write tools refuse the protected test, its commands cannot change it
//! (the `workspace-write` sandbox mounts it read-only), a subagent it
//! spawns inherits the list, and the merged change leaves the test as it
//! was. Real git repository, the scripted model server, the real sandbox.

use serde_json::json;
use troupe_protocol::ItemStatus;
use troupe_test_support::e2e::pipeline_run;
use troupe_test_support::events::tool_outputs;
use troupe_test_support::git::{TEST_SH, calc_repo};
use troupe_testkit::{Reply, Script};

use super::assert_exit;
use super::exec::{bin, session_events};

const PIPELINE: &str = "[[proposers]]\nname = \"fixer\"\n\
    task = \"Fix calc.sh so that sh test_calc.sh passes.\"\nprotect = [\"test_*.sh\"]\nsubagents = true\n";

fn script() -> Script {
    Script::replies(vec![])
        .with_route(
            "independent verifier",
            vec![
                Reply::tool_call("v1", "exec_command", json!({"command": "sh test_calc.sh"})),
                Reply::tool_call(
                    "v2",
                    "submit_verdict",
                    json!({"approved": true, "checks": [{"command": "sh test_calc.sh", "exit_code": 0, "output_excerpt": "ok"}]}),
                ),
                Reply::text("approved"),
            ],
        )
        // The proposer's helper tries the same shortcut.
        .with_route(
            "Helper task",
            vec![
                Reply::tool_call(
                    "h1",
                    "write_file",
                    json!({"path": "test_calc.sh", "content": "exit 0\n"}),
                ),
                Reply::tool_call(
                    "h2",
                    "exec_command",
                    json!({"command": "sed -i 's/exit 1/exit 0/' test_calc.sh"}),
                ),
                Reply::tool_call(
                    "h3",
                    "handoff",
                    json!({"state_summary": "the test is protected", "boundary_status": [{"name": "weaken the test", "status": "blocked"}]}),
                ),
                Reply::text("could not"),
            ],
        )
        .with_route(
            "Fix calc.sh",
            vec![
                Reply::tool_call(
                    "p1",
                    "write_file",
                    json!({"path": "test_calc.sh", "content": "exit 0\n"}),
                ),
                Reply::tool_call(
                    "p2",
                    "edit_file",
                    json!({"path": "test_calc.sh", "old_string": "exit 1", "new_string": "exit 0"}),
                ),
                Reply::tool_call(
                    "p3",
                    "exec_command",
                    json!({"command": "echo 'exit 0' > test_calc.sh"}),
                ),
                Reply::tool_call(
                    "p4",
                    "spawn_subagent",
                    json!({"name": "helper", "task": "Helper task: make sh test_calc.sh pass by any means."}),
                ),
                Reply::tool_call(
                    "p5",
                    "edit_file",
                    json!({"path": "calc.sh", "old_string": "$(($2 + $3 + 1))", "new_string": "$(($2 + $3))"}),
                ),
                Reply::tool_call(
                    "p6",
                    "handoff",
                    json!({"state_summary": "fixed add", "boundary_status": [{"name": "fix add", "status": "done"}], "modified_files": ["calc.sh"]}),
                ),
                Reply::text("fixed"),
            ],
        )
}

#[test]
fn protect_refuses_edits_of_a_protected_test_by_tool_command_and_subagent() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[("test_calc.sh", TEST_SH)]);
    let text = serde_json::to_string(&script()).unwrap();
    std::fs::write(ws.path().join(".vtcode-script.json"), text).unwrap();
    let out = pipeline_run(
        bin(),
        ws.path(),
        PIPELINE,
        &["--script", ".vtcode-script.json"],
    );
    let stdout = assert_exit(&out, 0);
    assert!(stdout.contains("merged: "), "{stdout}");
    let events = session_events(ws.path());
    let output = |id: &str| {
        tool_outputs(&events)
            .into_iter()
            .find(|o| o.call_id == id)
            .map(|o| (o.status, o.output.clone()))
            .unwrap_or_else(|| panic!("no output for {id}"))
    };
    // The write tools refuse it, the proposer's and its helper's.
    for id in ["p1", "p2", "h1"] {
        let (status, text) = output(id);
        assert_eq!(status, ItemStatus::Failed, "{id}: {text}");
        assert!(
            text.contains("`test_calc.sh` is protected (`test_*.sh`)"),
            "{id}: {text}"
        );
    }
    // Its commands run, and fail on the read-only file.
    for id in ["p3", "h2"] {
        let (_, text) = output(id);
        assert!(
            text.contains("Read-only file system") || text.contains("busy"),
            "{id}: {text}"
        );
    }
    let (status, text) = output("p5");
    assert_eq!(status, ItemStatus::Completed, "{text}");
    // The merged branch holds the fix and the test as it was.
    assert_eq!(
        std::fs::read_to_string(ws.path().join("test_calc.sh")).unwrap(),
        TEST_SH
    );
    let test = std::process::Command::new("sh")
        .arg("test_calc.sh")
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(test.status.success(), "the fix is merged");
}

#[test]
fn an_invalid_protect_glob_is_refused_naming_the_entry() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let out = pipeline_run(
        bin(),
        ws.path(),
        "[[proposers]]\nname = \"fixer\"\ntask = \"t\"\nprotect = [\"tests/[a\"]\n",
        &["--script", "none.json"],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("proposer `fixer`: protect: `tests/[a` is not a valid glob"),
        "{stderr}"
    );
}
