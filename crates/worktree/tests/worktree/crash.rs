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

/// `pid`'s start time, `/proc/<pid>/stat` field 22.
fn start_time(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &text[text.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// The state a create killed between writing its lock and its worktree's
/// directory leaves (the CI flake): `.git/worktrees/<id>/` holding only the
/// owner record and `locked`, no gitdir file, no directory.
fn killed_create(fx: &Fixture, id: &str, owner: &str) -> PathBuf {
    let admin = fx.dir.path().join(".git/worktrees").join(id);
    std::fs::create_dir_all(&admin).unwrap();
    std::fs::write(admin.join("troupe-owner"), owner).unwrap();
    std::fs::write(admin.join("locked"), "initializing\n").unwrap();
    admin
}

#[test]
fn a_lock_left_by_a_killed_creator_is_pruned() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    // A creator that ran and was killed: its pid is gone.
    let mut child = Command::new("sleep").arg("600").spawn().unwrap();
    let dead = format!("{} {}\n", child.id(), start_time(child.id()));
    child.kill().unwrap();
    child.wait().unwrap();
    let w1 = killed_create(&fx, "w1", &dead);
    // A creator whose pid now names a later process (this one).
    let reused = format!(
        "{} {}\n",
        std::process::id(),
        start_time(std::process::id()) + 1
    );
    let w2 = killed_create(&fx, "w2", &reused);

    let info = ws.list().unwrap();
    assert_eq!(info.len(), 2, "{info:?}");
    for i in &info {
        assert!(i.locked, "{i:?}");
        assert_eq!(i.stale.as_deref(), Some("its gitdir file is missing"));
    }
    let report = ws.prune().unwrap();
    assert_eq!(report.worktrees, ["w1", "w2"], "{report:?}");
    assert!(!w1.exists() && !w2.exists());
    assert!(ws.list().unwrap().is_empty());
    ws.create_worktree("w1").unwrap();
    ws.create_worktree("w2").unwrap();
    assert!(ws.prune().unwrap().is_empty());
}

#[test]
fn a_running_creators_lock_is_kept() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    let me = std::process::id();
    let admin = killed_create(&fx, "w1", &format!("{me} {}\n", start_time(me)));
    // Its directory is being written; its branch exists.
    write(&ws.worktrees_dir(), "w1/partial.txt", "x");
    let head = fx.repo.head().unwrap().peel_to_commit().unwrap();
    fx.repo.branch("troupe/w1", &head, false).unwrap();
    // A user's lock (a reason, no owner record) on a foreign worktree.
    let user = fx.dir.path().join(".git/worktrees/usb");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("locked"), "on a USB disk\n").unwrap();

    let report = ws.prune().unwrap();
    assert!(report.is_empty(), "{report:?}");
    assert!(admin.join("locked").is_file() && admin.join("troupe-owner").is_file());
    assert!(ws.worktrees_dir().join("w1/partial.txt").is_file());
    assert!(
        fx.repo
            .find_branch("troupe/w1", git2::BranchType::Local)
            .is_ok()
    );
    assert!(user.join("locked").is_file());
}
