use troupe_protocol::Usage;
use troupe_runtime::state::{
    BudgetStatus, CostBudget, LoopArtifact, LoopState, LoopStateError, LoopStateStore, LoopStatus,
};

use crate::names;

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn state_dir(ws: &std::path::Path) -> std::path::PathBuf {
    ws.join(".vtcode/state")
}

#[test]
fn save_then_load_round_trips_and_leaves_no_temp_file() {
    let ws = tempfile::tempdir().unwrap();
    let store = LoopStateStore::new(ws.path());
    assert_eq!(store.dir(), state_dir(ws.path()));
    let mut state = LoopState::new("nightly-1");
    for step in 1..=3u64 {
        state.record_step(&usage(100, 10), Some(0.25));
        state.set_artifact(LoopArtifact::path("handoff", format!("handoff-{step}.md")));
        store.save(&state).unwrap();
        assert_eq!(
            names(store.dir()),
            ["loop-nightly-1.json"],
            "temp file left"
        );
        let loaded = store.load("nightly-1").unwrap().unwrap();
        assert_eq!(loaded.step_index, step);
        assert_eq!(loaded, state);
    }
    let loaded = store.load("nightly-1").unwrap().unwrap();
    assert_eq!(loaded.usage, usage(300, 30));
    assert_eq!(loaded.cost_usd, Some(0.75));
    assert_eq!(loaded.status, LoopStatus::Running);
    assert_eq!(
        loaded.last_artifact.unwrap().path.as_deref(),
        Some("handoff-3.md")
    );
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(store.path("nightly-1").unwrap()).unwrap()).unwrap();
    assert_eq!(raw["status"], "running");
    assert_eq!(raw["step_index"], 3);
    assert_eq!(raw["schema_version"], 1);
}

#[test]
fn a_crash_mid_write_leaves_the_previous_state_intact() {
    let ws = tempfile::tempdir().unwrap();
    let store = LoopStateStore::new(ws.path());
    let mut state = LoopState::new("crashy");
    state.record_step(&usage(1, 1), Some(0.5));
    store.save(&state).unwrap();
    let good = std::fs::read(store.path("crashy").unwrap()).unwrap();

    // The writer died after writing half of the next state to its temp
    // file (write_atomic's name), and another process died the same way.
    state.record_step(&usage(1, 1), Some(0.5));
    let next = serde_json::to_vec_pretty(&state).unwrap();
    let tmp = store
        .dir()
        .join(format!(".loop-crashy.json.tmp-{}", std::process::id()));
    std::fs::write(&tmp, &next[..next.len() / 2]).unwrap();
    std::fs::write(store.dir().join(".loop-crashy.json.tmp-1"), &next[..10]).unwrap();

    assert_eq!(std::fs::read(store.path("crashy").unwrap()).unwrap(), good);
    let loaded = store.load("crashy").unwrap().unwrap();
    assert_eq!(loaded.step_index, 1);
    assert_eq!(
        store.list().unwrap(),
        ["crashy"],
        "temp files listed as loops"
    );

    // A reader that opened the file before the next save keeps reading
    // the whole previous state: the save replaces the file (a new inode),
    // it does not rewrite it in place.
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut reader = std::fs::File::open(store.path("crashy").unwrap()).unwrap();
    let inode = reader.metadata().unwrap().ino();

    // The next save replaces the stale temp file and lands whole.
    store.save(&state).unwrap();
    assert_eq!(store.load("crashy").unwrap().unwrap().step_index, 2);
    assert!(!tmp.exists(), "our temp file left behind");
    let path = store.path("crashy").unwrap();
    assert_ne!(
        std::fs::metadata(&path).unwrap().ino(),
        inode,
        "rewritten in place"
    );
    let mut old = Vec::new();
    reader.read_to_end(&mut old).unwrap();
    assert_eq!(old, good);
}

#[test]
fn a_missing_loop_is_none_and_list_is_empty_without_a_directory() {
    let ws = tempfile::tempdir().unwrap();
    let store = LoopStateStore::new(ws.path());
    assert!(store.load("never-ran").unwrap().is_none());
    assert!(store.list().unwrap().is_empty());
    assert!(!store.dir().exists(), "load created the directory");
}

#[test]
fn a_corrupt_file_errors_naming_the_path() {
    let ws = tempfile::tempdir().unwrap();
    let store = LoopStateStore::new(ws.path());
    std::fs::create_dir_all(store.dir()).unwrap();
    let path = store.path("broken").unwrap();

    std::fs::write(&path, b"{\"schema_version\": 1, \"id\": \"bro").unwrap();
    let err = store.load("broken").unwrap_err();
    assert!(
        matches!(err, LoopStateError::Corrupt { path: ref p, .. } if *p == path),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("corrupt"),
        "{msg}"
    );

    // Valid JSON for another loop, or of another schema version.
    let mut other = LoopState::new("other");
    std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
    let msg = store.load("broken").unwrap_err().to_string();
    assert!(msg.contains("loop `other`"), "{msg}");
    other.id = "broken".into();
    other.schema_version = 99;
    std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
    let msg = store.load("broken").unwrap_err().to_string();
    assert!(msg.contains("schema_version 99"), "{msg}");
}

#[test]
fn ids_that_could_escape_the_state_directory_are_refused() {
    let ws = tempfile::tempdir().unwrap();
    let store = LoopStateStore::new(ws.path());
    for id in [
        "",
        "../escape",
        "a/b",
        ".hidden",
        "a..b",
        "/abs",
        "a\\b",
        "spa ce",
    ] {
        assert!(
            matches!(store.load(id), Err(LoopStateError::InvalidId { .. })),
            "load accepted {id:?}"
        );
        let state = LoopState::new(id);
        assert!(
            matches!(store.save(&state), Err(LoopStateError::InvalidId { .. })),
            "save accepted {id:?}"
        );
    }
    assert!(store.load(&"x".repeat(129)).is_err());
    assert!(store.load(&"x".repeat(128)).unwrap().is_none());
    assert!(!ws.path().join("escape").exists());
    assert_eq!(
        names(ws.path()),
        Vec::<String>::new(),
        "something was written"
    );
}

#[test]
fn an_unknown_cost_makes_the_total_unknown_for_good() {
    let mut state = LoopState::new("x");
    state.record_step(&usage(10, 0), Some(1.0));
    state.record_step(&usage(10, 0), None);
    state.record_step(&usage(10, 0), Some(1.0));
    assert_eq!(state.cost_usd, None);
    assert_eq!(state.step_index, 3);
    let cost_only = CostBudget {
        max_cost_usd: Some(0.5),
        ..CostBudget::default()
    };
    assert_eq!(state.budget_status(&cost_only), BudgetStatus::Ok);
    let steps = CostBudget {
        max_steps: Some(3),
        ..CostBudget::default()
    };
    assert_eq!(state.budget_status(&steps), BudgetStatus::StepLimitReached);
}

#[test]
fn status_and_list() {
    let ws = tempfile::tempdir().unwrap();
    let store = LoopStateStore::new(ws.path());
    for id in ["b", "a"] {
        let mut s = LoopState::new(id);
        s.set_status(LoopStatus::Completed);
        store.save(&s).unwrap();
    }
    std::fs::write(store.dir().join("notes.md"), "- x").unwrap();
    assert_eq!(store.list().unwrap(), ["a", "b"]);
    let a = store.load("a").unwrap().unwrap();
    assert!(a.status.is_terminal());
    assert!(!LoopStatus::Paused.is_terminal());
    assert!(a.updated_at >= a.created_at);
}
