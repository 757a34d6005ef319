//! The read-only sandbox of exec_command, with real processes and files.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use troupe_runtime::agent::MemorySink;
use troupe_runtime::tools::{
    Capability, ExecCommandTool, ExecConfig, Sandbox, SandboxStatus, Tool, ToolContext, ToolOutput,
    ToolRegistry,
};
use troupe_runtime::verifier::{SubmitVerdictTool, verifier_tools};

use crate::Repo;

pub(crate) fn sandboxed(repo: &Repo) -> ExecCommandTool {
    ExecCommandTool::new(ExecConfig {
        sandbox: Some(Sandbox::read_only(&repo.scratch)),
        default_timeout: Duration::from_secs(30),
        ..ExecConfig::default()
    })
}

pub(crate) async fn run(tool: &dyn Tool, repo: &Repo, command: &str) -> ToolOutput {
    tool.call(json!({"command": command}), &ToolContext::new(&repo.root))
        .await
        .unwrap_or_else(|e| panic!("`{command}` did not run: {e}"))
}

fn submit() -> Arc<SubmitVerdictTool> {
    Arc::new(SubmitVerdictTool::new(
        "verifier",
        None,
        None,
        Arc::new(MemorySink::default()),
    ))
}

#[test]
fn probe_reports_enforced() {
    assert_eq!(
        Sandbox::probe(),
        SandboxStatus::FullyEnforced,
        "these tests need Landlock ABI v5 (Linux 6.10+)"
    );
}

#[test]
fn the_verifier_registry_offers_no_write_tool() {
    let repo = Repo::new();
    let exec = ExecConfig {
        sandbox: Some(Sandbox::read_only(&repo.scratch)),
        ..ExecConfig::default()
    };
    let tools = verifier_tools(exec, submit());
    assert_eq!(
        tools.names(),
        [
            "exec_command",
            "grep",
            "list_files",
            "read_file",
            "submit_verdict"
        ]
    );
    for name in tools.names() {
        let tool = tools.get(name).unwrap();
        assert_eq!(tool.capability(), Capability::ReadOnly, "{name}");
        assert!(tool.write_paths(&json!({"path": "x"})).is_empty(), "{name}");
    }
    // The proposer's registry does have them, and its exec is not read-only.
    let proposer = ToolRegistry::builtin();
    assert!(proposer.get("write_file").is_some() && proposer.get("edit_file").is_some());
    assert_eq!(
        proposer.get("exec_command").unwrap().capability(),
        Capability::Exec
    );
    // A sandboxed exec survives the read_only() filter; a plain one does not.
    let filtered = ToolRegistry::builtin_with(ExecConfig {
        sandbox: Some(Sandbox::read_only(&repo.scratch)),
        ..ExecConfig::default()
    })
    .read_only();
    assert!(filtered.get("exec_command").is_some());
    assert!(proposer.read_only().get("exec_command").is_none());
}

#[test]
fn an_unsandboxed_verifier_exec_is_not_read_only() {
    let tools = verifier_tools(ExecConfig::default(), submit());
    assert_eq!(
        tools.get("exec_command").unwrap().capability(),
        Capability::Exec
    );
    assert!(tools.get("write_file").is_none() && tools.get("edit_file").is_none());
}

#[tokio::test]
async fn touch_in_the_worktree_fails_for_the_verifier_and_works_for_a_proposer() {
    let repo = Repo::new();
    let verifier = sandboxed(&repo);
    let out = run(&verifier, &repo, "touch x").await;
    assert_eq!(out.exit_code, Some(1), "{}", out.output);
    assert!(out.output.contains("Permission denied"), "{}", out.output);
    assert!(!repo.root.join("x").exists());

    let proposer = ToolRegistry::builtin().get("exec_command").unwrap();
    let out = run(proposer.as_ref(), &repo, "touch x").await;
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    assert!(repo.root.join("x").exists());
}

#[tokio::test]
async fn the_verifier_cannot_change_delete_or_rename_anything_outside_scratch() {
    let repo = Repo::new();
    std::fs::write(repo.outside.join("f"), "keep\n").unwrap();
    let tool = sandboxed(&repo);
    let attempts = [
        "echo changed > README.md",
        "echo more >> lib.sh",
        "rm README.md",
        "mv lib.sh moved.sh",
        "mkdir newdir",
        "ln -s README.md link",
        ": > README.md",
        "git commit --allow-empty -q -m sneaky",
        &format!("echo changed > {}/f", repo.outside.display()),
        &format!("touch {}/new", repo.outside.display()),
        "sh -c 'sh -c \"touch nested\"'",
    ];
    for command in attempts {
        let out = run(&tool, &repo, command).await;
        assert_ne!(
            out.exit_code,
            Some(0),
            "`{command}` succeeded: {}",
            out.output
        );
    }
    assert_eq!(
        std::fs::read_to_string(repo.root.join("README.md")).unwrap(),
        "# demo\n"
    );
    assert!(repo.root.join("lib.sh").exists() && !repo.root.join("moved.sh").exists());
    assert!(!repo.root.join("newdir").exists() && !repo.root.join("nested").exists());
    assert_eq!(
        std::fs::read_to_string(repo.outside.join("f")).unwrap(),
        "keep\n"
    );
    assert!(!repo.outside.join("new").exists());
    assert_eq!(crate::git(&repo.root, &["rev-parse", "HEAD"]), repo.head);
}

#[tokio::test]
async fn the_verifier_reads_runs_and_writes_its_scratch_dir() {
    let repo = Repo::new();
    let tool = sandboxed(&repo);
    let out = run(
        &tool,
        &repo,
        ". ./lib.sh && add 2 3 && cat README.md && git log --oneline | wc -l \
         && echo built > \"$TMPDIR/out\" && echo cache > \"$HOME/c\" \
         && mkdir -p \"$CARGO_TARGET_DIR\" && echo quiet > /dev/null && echo \"$TMPDIR\"",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    let preview = out.output.split("---\n").nth(1).unwrap();
    let tmp = repo.scratch.join("tmp");
    assert_eq!(
        preview,
        format!("5\n# demo\n2\n{}\n", tmp.display()),
        "{}",
        out.output
    );
    assert_eq!(std::fs::read_to_string(tmp.join("out")).unwrap(), "built\n");
    assert_eq!(
        std::fs::read_to_string(repo.scratch.join("home/c")).unwrap(),
        "cache\n"
    );
    assert!(repo.scratch.join("target").is_dir());
}

#[tokio::test]
async fn cargo_test_runs_in_the_sandbox_with_its_target_in_scratch() {
    let repo = Repo::new();
    let krate = repo.root.join("krate");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"krate\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        krate.join("src/lib.rs"),
        "pub fn add(a: i32, b: i32) -> i32 { a + b }\n\
         #[test] fn adds() { assert_eq!(add(2, 3), 5); }\n",
    )
    .unwrap();
    let status = std::process::Command::new("cargo")
        .args(["generate-lockfile", "--offline", "-q"])
        .current_dir(&krate)
        .status()
        .unwrap();
    assert!(status.success());
    let tool = ExecCommandTool::new(ExecConfig {
        sandbox: Some(Sandbox::read_only(&repo.scratch)),
        default_timeout: Duration::from_secs(300),
        ..ExecConfig::default()
    });
    let out = tool
        .call(
            json!({"command": "cargo test --offline --locked -q 2>&1", "cwd": "krate"}),
            &ToolContext::new(&repo.root),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    assert!(out.output.contains("1 passed"), "{}", out.output);
    assert!(
        !krate.join("target").exists(),
        "target/ was written in the worktree"
    );
    assert!(repo.scratch.join("target").is_dir());
}

#[tokio::test]
async fn the_command_may_write_its_own_output_by_path() {
    let repo = Repo::new();
    let tool = sandboxed(&repo);
    let out = run(
        &tool,
        &repo,
        "echo a > /dev/stdout; echo b >> /dev/stderr; echo c | tee -a /dev/stderr >/dev/null; echo d >&2",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    assert!(!out.output.contains("Permission denied"), "{}", out.output);
    // Writing through /dev/stdout reopens the spool file with its own
    // offset, as it would without the sandbox; the lines all arrive.
    for line in ["b\n", "c\n", "d\n"] {
        assert!(out.output.contains(line), "{}", out.output);
    }
}
