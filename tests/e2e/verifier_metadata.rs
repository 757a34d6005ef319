//! A hostile verifier, through `troupe run`: it tries to change file
//! metadata (setuid bits, the repository's git config, times, inode
//! flags) from its read-only sandbox. Landlock does not cover metadata;
//! the seccomp filter refuses every attempt with EPERM and nothing changes.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use serde_json::json;
use troupe_protocol::{ItemDetails, ThreadEvent};
use troupe_testkit::{Reply, Script};

use super::assert_exit;
use super::exec::session_events;
use super::write_vtcode_pipeline;
use troupe_test_support::git::CALC_SH;

const ATTACKS: [&str; 5] = [
    "chmod 4755 calc.sh",
    "chmod 000 \"$(git rev-parse --path-format=absolute --git-common-dir)/config\"",
    "chown 1234:1234 calc.sh",
    "chattr +i calc.sh",
    "/usr/bin/python3 -c \"import os; os.setxattr('calc.sh', 'user.evil', b'1')\"",
];

fn stat(path: &Path) -> (u32, u32, i64, i64) {
    let m = std::fs::metadata(path).unwrap();
    (m.mode(), m.uid(), m.ctime(), m.ctime_nsec())
}

#[test]
fn a_verifier_cannot_chmod_chown_chattr_or_setxattr() {
    let ws = tempfile::tempdir().unwrap();
    let dir = ws.path();
    troupe_test_support::git::repo_at(dir, "initial", &[("calc.sh", CALC_SH)]);
    let config_before = stat(&dir.join(".git/config"));

    let mut verifier: Vec<Reply> = ATTACKS
        .iter()
        .enumerate()
        .map(|(i, c)| Reply::tool_call(format!("v{i}"), "exec_command", json!({"command": c})))
        .collect();
    // Every attempt fails on the head; the approval stands only because
    // the verdict calls them pre-existing and troupe's own (sandboxed)
    // runs of them on the base fail too.
    verifier.push(Reply::tool_call(
        "vz",
        "submit_verdict",
        json!({"approved": true, "pre_existing": ATTACKS}),
    ));
    verifier.push(Reply::text("approved"));
    let handoff = json!({"state_summary": "fixed add (MARK-meta)", "boundary_status": [{"name": "fix add", "status": "done"}], "modified_files": ["calc.sh"]});
    let script = Script::replies(vec![])
        .with_route("MARK-meta", verifier)
        .with_route(
            "Fix calc.sh",
            vec![
                Reply::tool_call("p1", "edit_file", json!({"path": "calc.sh", "old_string": "$(($2 + $3 + 1))", "new_string": "$(($2 + $3))"})),
                Reply::tool_call("p2", "handoff", handoff),
                Reply::text("fixed"),
            ],
        );
    let pipeline =
        "[pipeline]\nmax_rounds = 1\n[[proposers]]\nname = \"fixer\"\ntask = \"Fix calc.sh.\"\n";
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(write_vtcode_pipeline(dir, pipeline, &script))
        .arg("--workspace")
        .arg(dir)
        .current_dir(dir)
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap();
    super::vtcode::check_output(&out, "troupe run");
    assert_exit(&out, 0);

    // Every attempt ran in the sandbox and failed with EPERM.
    let events = session_events(dir);
    let commands: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::ItemCompleted(i) => match &i.item.details {
                ItemDetails::CommandExecution(c) => Some(c.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    for attack in ATTACKS {
        let c = commands
            .iter()
            .find(|c| c.command.contains(attack))
            .unwrap_or_else(|| panic!("`{attack}` did not run: {commands:?}"));
        assert_ne!(
            c.exit_code,
            Some(0),
            "`{attack}` succeeded: {}",
            c.aggregated_output
        );
        assert!(
            c.aggregated_output.contains("Operation not permitted"),
            "`{attack}`: {}",
            c.aggregated_output
        );
    }
    // The repository's config is untouched and the merged file is a plain,
    // non-executable file with no setuid bit.
    assert_eq!(stat(&dir.join(".git/config")), config_before);
    let mode = std::fs::metadata(dir.join("calc.sh")).unwrap().mode();
    assert_eq!(mode & 0o7111, 0, "mode {mode:o}");
    let tree = troupe_worktree::recent_commits(dir, 1).unwrap();
    assert!(tree[0].contains("fixer"), "{tree:?}");
    let ls = Command::new("git")
        .args(["ls-tree", "HEAD", "calc.sh"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&ls.stdout).starts_with("100644 "),
        "{}",
        String::from_utf8_lossy(&ls.stdout)
    );
}
