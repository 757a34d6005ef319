//! A child process creating worktrees is killed with SIGKILL; `prune` clears
//! what it left and the same ids can be created again.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use troupe_worktree::Workspace;

use super::*;

const CHILD_ENV: &str = "TROUPE_WORKTREE_CRASH_DIR";

/// Not a test by itself: the body of the child process that the tests below
/// start (this same test binary, run with `--ignored --exact
/// crash::crash_child_creator`). It creates worktrees `w0`, `w1`, ... and
/// appends each finished id to `done.txt`, until it is killed.
#[test]
#[ignore = "child process of the crash tests"]
fn crash_child_creator() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let ws = Workspace::open(dir.join("repo")).unwrap();
    let mut done = String::new();
    for n in 0.. {
        let wt = ws.create_worktree(&format!("w{n}")).unwrap();
        done.push_str(&format!("{}\n", wt.id()));
        std::fs::write(dir.join("done.tmp"), &done).unwrap();
        std::fs::rename(dir.join("done.tmp"), dir.join("done.txt")).unwrap();
    }
}

/// A repository with `n` files in `repo/` under a temp dir.
fn big_fixture(n: usize) -> (tempfile::TempDir, Repository) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    let mut opts = git2::RepositoryInitOptions::new();
    opts.initial_head("develop");
    let repo = Repository::init_opts(&root, &opts).unwrap();
    for i in 0..n {
        write(
            &root,
            &format!("d{}/f{i}.txt", i % 20),
            &format!("file {i}\n").repeat(20),
        );
    }
    commit_all(&repo, "many files");
    (dir, repo)
}

/// Runs the child until it has finished `min_done` worktrees, waits `extra`,
/// kills it with SIGKILL and returns the ids it reported finished.
fn run_and_kill(dir: &Path, min_done: usize, extra: Duration) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "crash::crash_child_creator",
            "--nocapture",
        ])
        .env(CHILD_ENV, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let report = dir.join("done.txt");
    let read = || -> Vec<String> {
        std::fs::read_to_string(&report)
            .map(|s| s.lines().map(str::to_string).collect())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while read().len() < min_done {
        assert!(Instant::now() < deadline, "child never finished a worktree");
        assert!(child.try_wait().unwrap().is_none(), "child exited early");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(extra);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    read()
}

#[test]
fn sigkill_after_create_then_directory_deleted_then_prune() {
    let (dir, _repo) = big_fixture(50);
    let done = run_and_kill(dir.path(), 1, Duration::ZERO);
    let ws = Workspace::open(dir.path().join("repo")).unwrap();
    // Every worktree the child left: delete the first one's directory.
    std::fs::remove_dir_all(ws.worktrees_dir().join("w0")).unwrap();
    let report = ws.prune().unwrap();
    assert!(report.worktrees.contains(&"w0".to_string()), "{report:?}");
    for info in ws.list().unwrap() {
        assert!(info.stale.is_none(), "left after prune: {info:?}");
    }
    assert!(done.contains(&"w0".to_string()));
    let wt = ws.create_worktree("w0").unwrap();
    assert!(wt.status().unwrap().is_clean());
}

#[test]
fn sigkill_in_the_middle_of_creating_then_prune() {
    for round in 0..3 {
        let (dir, repo) = big_fixture(800);
        let extra = Duration::from_millis(fastrand_ms(round));
        let done = run_and_kill(dir.path(), 1, extra);
        let ws = Workspace::open(dir.path().join("repo")).unwrap();
        let report = ws.prune().unwrap();
        eprintln!(
            "round {round}: killed after {} done, {extra:?}: {report:?}",
            done.len()
        );
        let list = ws.list().unwrap();
        for info in &list {
            assert!(
                info.stale.is_none(),
                "round {round}: left after prune: {info:?} ({report:?})"
            );
        }
        // Every worktree reported finished is still there and whole.
        for id in &done {
            let wt = ws.worktree(id).unwrap();
            assert!(wt.status().unwrap().is_clean(), "round {round}: {id}");
        }
        // The id being created when the kill landed can be created now.
        let next = format!("w{}", list.len());
        let wt = ws.create_worktree(&next).unwrap();
        assert_eq!(
            wt.status().unwrap().head,
            repo.head().unwrap().target().unwrap().to_string()
        );
        assert!(ws.prune().unwrap().is_empty(), "round {round}");
        assert!(dirty_paths(&repo).is_empty(), "round {round}");
    }
}

/// A spread of kill delays across the create cycle.
fn fastrand_ms(round: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    (nanos + round * 37) % 120
}
