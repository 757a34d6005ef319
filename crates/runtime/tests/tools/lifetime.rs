//! Tool processes and troupe's lifetime: the death signal is tied to a
//! thread that lives as long as troupe, and resume's kill of a recorded
//! group refuses a group that is not the one recorded. Real processes.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use troupe_runtime::tools::{
    GroupFate, SpawnHook, SpawnedGroup, ToolContext, kill_recorded_group, start_time,
};

use crate::{Fixture, alive, read_pid};

fn field(out: &str, key: &str) -> Option<String> {
    out.split("\n---\n")
        .next()?
        .lines()
        .find_map(|l| Some(l.strip_prefix(key)?.strip_prefix(": ")?.to_string()))
}

/// The command starts on a `spawn_blocking` thread that exits long before
/// the command ends. Were the shell forked from that thread, its death
/// signal would kill it when the thread exits; it runs to its end.
#[test]
fn a_command_outlives_the_thread_that_started_it() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_keep_alive(Duration::from_millis(10))
        .enable_all()
        .build()
        .unwrap();
    let fx = Fixture::new();
    let spawned = std::sync::Arc::new(parking_lot::Mutex::new(None::<SpawnedGroup>));
    let seen = spawned.clone();
    let mut ctx = ToolContext::new(&fx.root);
    ctx.on_spawn = Some(SpawnHook::new(move |g| *seen.lock() = Some(*g)));
    let args =
        json!({"command": "echo $$ > sh.pid; sleep 1; echo done > done.txt", "timeout_ms": 0});
    let (tool, args) = fx
        .tools
        .validate("exec_command", &args.to_string())
        .unwrap();
    let handle = rt.handle().clone();
    let (tool2, ctx2) = (tool.clone(), ctx.clone());
    let first = rt
        .block_on(rt.spawn_blocking(move || handle.block_on(tool2.call(args, &ctx2))))
        .unwrap()
        .unwrap();
    assert_eq!(field(&first.output, "status").as_deref(), Some("running"));
    let id = field(&first.output, "session_id").unwrap();
    let sh = rt.block_on(read_pid(&fx.root.join("sh.pid")));
    let group = spawned.lock().expect("the spawn hook was told");
    assert_eq!(group.pgid, sh, "the hook names the shell's group");
    assert_eq!(Some(group.start_time), start_time(sh));
    // Let the blocking thread idle out and exit.
    std::thread::sleep(Duration::from_millis(300));
    let wait = json!({"action": "wait", "session_id": id, "timeout_ms": 10_000});
    let (tool, wait) = fx
        .tools
        .validate("exec_command", &wait.to_string())
        .unwrap();
    let out = rt.block_on(tool.call(wait, &ctx)).unwrap();
    assert_eq!(
        field(&out.output, "status").as_deref(),
        Some("exited"),
        "{}",
        out.output
    );
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    assert_eq!(fx.read("done.txt"), "done\n");
}

#[test]
fn a_recorded_group_is_killed_only_when_its_leader_start_time_matches() {
    let mut child = Command::new("sleep")
        .arg("30")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    let start = start_time(pid).unwrap();
    assert_eq!(kill_recorded_group(pid, start + 1), GroupFate::Reused);
    assert!(alive(pid), "a group with another start time was killed");
    assert_eq!(kill_recorded_group(pid, start), GroupFate::Killed);
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert_eq!(kill_recorded_group(pid, start), GroupFate::Gone);
}

#[test]
fn a_group_whose_leader_is_gone_is_killed_through_its_members() {
    let dir = tempfile::tempdir().unwrap();
    let mut sh = Command::new("sh")
        .args(["-c", "sleep 30 & echo $! > bg.pid"])
        .current_dir(dir.path())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = i32::try_from(sh.id()).unwrap();
    let start = start_time(pgid).unwrap();
    assert!(sh.wait().unwrap().success());
    let bg: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(bg));
    // Members that started before the recorded leader cannot be its
    // descendants: another group got the id.
    assert_eq!(kill_recorded_group(pgid, u64::MAX), GroupFate::Reused);
    assert!(alive(bg));
    assert_eq!(kill_recorded_group(pgid, start), GroupFate::Killed);
    let gone = (0..250).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        !alive(bg)
    });
    assert!(gone, "the background member {bg} survived");
}
