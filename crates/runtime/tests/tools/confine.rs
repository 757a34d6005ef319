//! What a command troupe starts can do to troupe: its bounding set lacks
//! the capabilities that open a non-dumpable process's /proc files or read
//! memory another way, for `exec_command` and for hooks. Real processes;
//! the bits are checked as root (elsewhere there is nothing to drop), so
//! those tests are `#[ignore = "needs root"]` and `.ci/run` runs them.

use serde_json::json;
use troupe_runtime::hooks::{HookConfig, HookEvent, HookRunner};
use troupe_runtime::tools::{ToolContext, is_dumpable, make_undumpable};

use crate::Fixture;

/// CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE, CAP_SYS_ADMIN,
/// CAP_PERFMON, CAP_BPF.
const DROPPED: [u32; 6] = [16, 17, 19, 21, 38, 39];

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// Fails unless this test is root (as a user there are no capabilities
/// to drop, so nothing would be checked).
fn assert_root() {
    assert!(
        is_root(),
        "needs root: as a user there are no capabilities to drop"
    );
}

/// The `CapBnd` mask printed by `grep CapBnd /proc/self/status`.
fn bounding(out: &str) -> u64 {
    let hex = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("CapBnd:"))
        .unwrap_or_else(|| panic!("no CapBnd in {out}"))
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

fn assert_dropped(mask: u64, what: &str) {
    for cap in DROPPED {
        assert_eq!(
            mask & (1 << cap),
            0,
            "{what} still has capability {cap}: {mask:x}"
        );
    }
    // Ordinary capabilities stay (CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_KILL).
    for cap in [0, 1, 5] {
        assert_ne!(
            mask & (1 << cap),
            0,
            "{what} lost capability {cap}: {mask:x}"
        );
    }
}

#[tokio::test]
#[ignore = "needs root"]
async fn exec_command_runs_without_the_dropped_capabilities() {
    assert_root();
    let fx = Fixture::new();
    let ctx = ToolContext::new(&fx.root);
    let args = json!({"command": "sh -c 'grep CapBnd /proc/self/status'"});
    let (tool, args) = fx
        .tools
        .validate("exec_command", &args.to_string())
        .unwrap();
    let out = tool.call(args, &ctx).await.unwrap();
    // The grandchild too: the bounding set is inherited.
    assert_dropped(bounding(&out.output), "exec_command");
    let own = bounding(&std::fs::read_to_string("/proc/self/status").unwrap());
    assert_ne!(own & (1 << 19), 0, "the test itself keeps CAP_SYS_PTRACE");
}

#[tokio::test]
#[ignore = "needs root"]
async fn hooks_run_without_the_dropped_capabilities() {
    assert_root();
    let fx = Fixture::new();
    let config = HookConfig {
        session_start: vec!["grep CapBnd /proc/self/status".into()],
        ..HookConfig::default()
    };
    let runner = HookRunner::new(config, &fx.root);
    let outcome = runner
        .run(HookEvent::SessionStart {
            source: "startup".into(),
        })
        .await;
    let result = &outcome.results[0];
    assert_eq!(result.exit_code, Some(0), "{result:?}");
    assert_dropped(bounding(&result.stdout), "a hook");
}

/// The test binary runs one test per process (nextest), so making it
/// non-dumpable touches nothing else.
#[test]
fn make_undumpable_clears_the_flag() {
    assert!(is_dumpable());
    make_undumpable().unwrap();
    assert!(!is_dumpable());
}
