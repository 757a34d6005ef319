use std::collections::HashSet;
use std::sync::Arc;

use serde_json::json;
use troupe_runtime::state::memory::{MAX_ENTRY_BYTES, MAX_READ_ENTRIES};
use troupe_runtime::state::{LoopMemory, MemoryError, MemoryKind, RememberTool};
use troupe_runtime::tools::{Capability, ToolContext, ToolError, ToolRegistry};

/// A main workspace and, beside it, an agent's worktree.
struct Setup {
    _dir: tempfile::TempDir,
    state_dir: std::path::PathBuf,
    worktree: std::path::PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("main/.vtcode/state");
    let worktree = dir.path().join("main/.vtcode/worktrees/agent-1");
    std::fs::create_dir_all(&worktree).unwrap();
    Setup {
        _dir: dir,
        state_dir,
        worktree,
    }
}

fn registry(memory: LoopMemory, agent: &str) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    registry.register(Arc::new(RememberTool::new(memory, agent)));
    registry
}

async fn call(
    registry: &ToolRegistry,
    ctx: &ToolContext,
    args: serde_json::Value,
) -> Result<String, ToolError> {
    let (tool, args) = registry.validate("remember", &args.to_string())?;
    tool.call(args, ctx).await.map(|out| out.output)
}

#[tokio::test]
async fn remember_appends_notes_and_decisions_to_the_workspace_state_dir() {
    let s = setup();
    let memory = LoopMemory::new(&s.state_dir);
    let registry = registry(memory.clone(), "proposer-1");
    let tool = registry.get("remember").unwrap();
    assert_eq!(tool.capability(), Capability::Write);
    // The agent runs in its worktree; memory goes to the main state dir.
    let ctx = ToolContext::new(&s.worktree);

    let out = call(
        &registry,
        &ctx,
        json!({"kind": "note", "text": "tests need --locked"}),
    )
    .await
    .unwrap();
    assert!(out.contains("notes.md"), "{out}");
    for args in [
        json!({"kind": "decision", "text": "use parking_lot\nbecause it is already a dep"}),
        json!({"kind": "note", "text": "second note"}),
    ] {
        call(&registry, &ctx, args).await.unwrap();
    }

    let notes = memory.notes(10).unwrap();
    let texts: Vec<&str> = notes.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(texts, ["tests need --locked", "second note"]);
    assert!(notes.iter().all(|e| e.agent_id == "proposer-1"));
    let decisions = memory.decisions(10).unwrap();
    assert_eq!(decisions.len(), 1);
    assert_eq!(
        decisions[0].text,
        "use parking_lot\nbecause it is already a dep"
    );

    let raw = std::fs::read_to_string(s.state_dir.join("decisions.md")).unwrap();
    assert!(
        raw.starts_with("- 20") && raw.contains(" [proposer-1] use parking_lot\n  because"),
        "{raw}"
    );
    assert!(
        !s.worktree.join(".vtcode").exists(),
        "wrote into the worktree"
    );
    assert_eq!(
        tool.write_paths(&json!({"kind": "decision", "text": "x"})),
        [".vtcode/state/decisions.md"]
    );
}

#[tokio::test]
async fn remember_refuses_bad_arguments() {
    let s = setup();
    let registry = registry(LoopMemory::new(&s.state_dir), "a");
    let ctx = ToolContext::new(&s.worktree);
    let err = call(&registry, &ctx, json!({"kind": "todo", "text": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err.class(), "schema", "{err}");
    let err = call(&registry, &ctx, json!({"kind": "note"}))
        .await
        .unwrap_err();
    assert_eq!(err.class(), "schema", "{err}");
    let err = call(&registry, &ctx, json!({"kind": "note", "text": "  \n "}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    let long = "x".repeat(MAX_ENTRY_BYTES + 1);
    let err = call(&registry, &ctx, json!({"kind": "note", "text": long}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("4097 bytes"), "{err}");
    assert!(!s.state_dir.join("notes.md").exists());
}

#[test]
fn concurrent_appends_from_eight_threads_never_interleave() {
    let s = setup();
    let memory = LoopMemory::new(&s.state_dir);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let memory = memory.clone();
            std::thread::spawn(move || {
                for i in 0..100 {
                    // Two lines and some bulk, so a torn or interleaved
                    // write would show.
                    let text = format!("entry {t}-{i} {}\nsecond line of {t}-{i}", "y".repeat(300));
                    memory
                        .append(MemoryKind::Note, &format!("agent-{t}"), &text)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let raw = std::fs::read_to_string(s.state_dir.join("notes.md")).unwrap();
    let lines: Vec<&str> = raw.lines().collect();
    assert_eq!(lines.len(), 1600);
    let mut seen = HashSet::new();
    for pair in lines.chunks(2) {
        let head = pair[0];
        assert!(head.starts_with("- "), "not an entry head: {head:.80}");
        let agent = head.split(" [").nth(1).unwrap().split(']').next().unwrap();
        let key = head
            .split("entry ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        assert_eq!(agent, format!("agent-{}", key.split('-').next().unwrap()));
        assert!(head.ends_with(&"y".repeat(300)), "torn head {key}");
        assert_eq!(pair[1], format!("  second line of {key}"));
        assert!(seen.insert(key.to_string()), "duplicate {key}");
    }
    assert_eq!(seen.len(), 800);
    assert!(memory.decisions(10).unwrap().is_empty());
}

#[test]
fn readers_return_the_last_entries_bounded() {
    let s = setup();
    let memory = LoopMemory::new(&s.state_dir).with_sync(false);
    for i in 0..150 {
        memory
            .append(MemoryKind::Decision, "a", &format!("d{i}"))
            .unwrap();
    }
    let last: Vec<String> = memory
        .decisions(3)
        .unwrap()
        .into_iter()
        .map(|e| e.text)
        .collect();
    assert_eq!(last, ["d147", "d148", "d149"]);
    let all = memory.decisions(10_000).unwrap();
    assert_eq!(all.len(), MAX_READ_ENTRIES);
    assert_eq!(all[0].text, "d50");
    assert!(all.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(memory.decisions(0).unwrap().is_empty());
    assert!(
        memory.notes(5).unwrap().is_empty(),
        "decisions leaked into notes"
    );
}

#[test]
fn readers_only_read_the_tail_of_a_large_file_and_cut_at_an_entry() {
    let s = setup();
    let memory = LoopMemory::new(&s.state_dir).with_sync(false);
    let bulk = "z".repeat(MAX_ENTRY_BYTES - 100);
    for i in 0..100 {
        memory
            .append(MemoryKind::Note, "a", &format!("n{i:03} {bulk}"))
            .unwrap();
    }
    let size = std::fs::metadata(memory.path(MemoryKind::Note))
        .unwrap()
        .len();
    assert!(size > 300 * 1024);
    let got = memory.notes(100).unwrap();
    assert!(got.len() < 70 && got.len() > 50, "{} entries", got.len());
    assert!(
        got.iter().all(|e| e.text.len() == bulk.len() + 5),
        "a cut entry came back"
    );
    assert!(got.last().unwrap().text.starts_with("n099 "));
}

#[test]
fn agent_ids_and_text_cannot_break_the_format() {
    let s = setup();
    let memory = LoopMemory::new(&s.state_dir).with_sync(false);
    memory
        .append(
            MemoryKind::Note,
            "evil] agent\n- 2026",
            "line one\r\n- 2026-01-01T00:00:00Z [x] fake\n\nlast  \n\n",
        )
        .unwrap();
    memory.append(MemoryKind::Note, "", "by nobody").unwrap();
    let notes = memory.notes(10).unwrap();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert_eq!(notes[0].agent_id, "evil__agent_-_2026");
    assert_eq!(
        notes[0].text,
        "line one\n- 2026-01-01T00:00:00Z [x] fake\n\nlast"
    );
    assert_eq!(notes[1].agent_id, "unknown");
    assert!(matches!(
        memory.append(MemoryKind::Note, "a", ""),
        Err(MemoryError::Empty)
    ));
}
