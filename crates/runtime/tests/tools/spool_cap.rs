//! `[tools] max_spool_bytes`: exec_command's spool files stay bounded per
//! session. Real processes, a real spool directory.

use serde_json::json;
use troupe_runtime::tools::{ExecConfig, ToolContext};

use crate::Fixture;

fn spooled(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| {
                    let len = e.metadata().unwrap().len();
                    (e.file_name().to_string_lossy().into_owned(), len)
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn total(dir: &std::path::Path) -> u64 {
    spooled(dir).iter().map(|(_, n)| n).sum()
}

#[tokio::test]
async fn spool_files_stop_at_the_session_cap_and_the_result_says_so() {
    let fx = Fixture::with_exec(ExecConfig {
        preview_bytes: 1024,
        max_spool_bytes: 100_000,
        ..ExecConfig::default()
    });
    let dir = fx.root.parent().unwrap().join("derived");
    let ctx: ToolContext = fx.ctx.clone().with_spool_dir(&dir);
    let call = |args: serde_json::Value| {
        let ctx = ctx.clone();
        let fx = &fx;
        async move { fx.call_with("exec_command", args, &ctx).await.unwrap() }
    };
    // 48,894 bytes: under the cap, spooled and kept.
    let first = call(json!({"command": "seq 1 10000"})).await;
    assert!(first.spool_path.is_some());
    assert!(!first.output.contains("spool: not kept"));
    assert_eq!(total(&dir), 48_894);
    // 108,894 bytes more takes the session past the cap: previewed, then
    // its spool file is deleted.
    let second = call(json!({"command": "seq 1 20000"})).await;
    assert!(second.spool_path.is_none(), "{}", second.output);
    assert!(
        second.output.contains("spool: not kept") && second.output.contains("max_spool_bytes"),
        "{}",
        second.output
    );
    assert!(
        second.output.ends_with("19999\n20000\n"),
        "the preview is there"
    );
    assert!(second.output.len() < 1024 + 600, "bounded");
    assert_eq!(total(&dir), 48_894, "{:?}", spooled(&dir));
    // A command still running holds its spool: the session is past the
    // cap, so the next command is not spooled at all.
    let running = call(json!({"command": "seq 1 20000; sleep 3", "timeout_ms": 1000})).await;
    assert!(
        running.output.contains("status: running"),
        "{}",
        running.output
    );
    assert!(total(&dir) > 100_000);
    let capped = call(json!({"command": "echo small"})).await;
    assert!(capped.spool_path.is_none(), "{}", capped.output);
    assert!(
        capped.output.contains("spool: not kept"),
        "{}",
        capped.output
    );
    assert!(capped.output.ends_with("small\n"), "{}", capped.output);
    let id = running
        .output
        .lines()
        .find_map(|l| l.strip_prefix("session_id: "))
        .unwrap()
        .to_string();
    let done = call(json!({"action": "wait", "session_id": id, "timeout_ms": 10_000})).await;
    assert!(done.output.contains("status: exited"), "{}", done.output);
    assert!(done.output.contains("spool: not kept"), "{}", done.output);
    assert_eq!(total(&dir), 48_894, "{:?}", spooled(&dir));
}
