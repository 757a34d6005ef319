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

/// Runs the creator child until it has finished `min_done` worktrees,
/// waits `extra`, kills it with SIGKILL and returns the ids it reported
/// finished.
fn run_and_kill(dir: &Path, min_done: usize, extra: Duration) -> Vec<String> {
    run_and_kill_child(dir, "crash::crash_child_creator", min_done, extra)
}

/// Runs the child test `name` until it has reported `min_done` rounds in
/// `done.txt`, waits `extra`, kills it with SIGKILL and returns the rounds
/// it reported.
fn run_and_kill_child(dir: &Path, name: &str, min_done: usize, extra: Duration) -> Vec<String> {
    run_and_kill_after(dir, name, min_done, |_| extra)
}

/// [`run_and_kill_child`], the wait after `min_done` rounds given by
/// `extra` from the last round's duration (the time between the last two
/// reports; zero when `min_done` < 2).
fn run_and_kill_after(
    dir: &Path,
    name: &str,
    min_done: usize,
    extra: impl FnOnce(Duration) -> Duration,
) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--ignored", "--exact", name, "--nocapture"])
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
    let mut seen = (0, Instant::now());
    let mut last_round = Duration::ZERO;
    while seen.0 < min_done {
        assert!(Instant::now() < deadline, "child never finished a round");
        assert!(child.try_wait().unwrap().is_none(), "child exited early");
        std::thread::sleep(Duration::from_millis(1));
        let now = read().len();
        if now > seen.0 {
            if seen.0 > 0 {
                last_round = seen.1.elapsed();
            }
            seen = (now, Instant::now());
        }
    }
    std::thread::sleep(extra(last_round));
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

/// Not a test by itself: the child process of
/// [`sigkill_while_committing_and_merging_then_merge_again`]. It makes
/// worktree `m`; round `n` rewrites its files, commits them and merges
/// them into the parent, then appends `n` to `done.txt`, until killed.
#[test]
#[ignore = "child process of the crash tests"]
fn crash_child_merger() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let ws = Workspace::open(dir.join("repo")).unwrap();
    let wt = ws.create_worktree("m").unwrap();
    let mut done = String::new();
    for n in 0.. {
        for i in 0..200 {
            write(
                wt.path(),
                &format!("d{}/f{i}.txt", i % 20),
                &format!("round {n} file {i}\n").repeat(20),
            );
        }
        wt.commit(&format!("round {n}")).unwrap();
        assert!(!matches!(
            ws.merge(&wt).unwrap(),
            troupe_worktree::MergeOutcome::Conflict { .. }
        ));
        done.push_str(&format!("{n}\n"));
        std::fs::write(dir.join("done.tmp"), &done).unwrap();
        std::fs::rename(dir.join("done.tmp"), dir.join("done.txt")).unwrap();
    }
}

/// A troupe killed while committing a worktree or merging it into the
/// parent (the scripts/chaos failure: a coordinator SIGKILLed mid-merge
/// left `index.lock`, and the resumed session could never merge that
/// child) leaves nothing that stops the next commit and merge: the
/// worktree it was on is committed and merged again, and the parent ends
/// clean with that round's files.
#[test]
fn sigkill_while_committing_and_merging_then_merge_again() {
    // Kills spread over a round: most of it is the commit (hashing the
    // files), the end the merge.
    for (round, share) in [0.3, 0.7, 0.85, 0.95].into_iter().enumerate() {
        let (dir, repo) = big_fixture(20);
        let done = run_and_kill_after(dir.path(), "crash::crash_child_merger", 2, |r| {
            r.mul_f64(share)
        });
        let extra = format!("{share} of a round");
        let ws = Workspace::open(dir.path().join("repo")).unwrap();
        let writing: Vec<_> = [repo.path().to_path_buf()]
            .into_iter()
            .chain(
                ws.list()
                    .unwrap()
                    .iter()
                    .map(|w| repo.path().join("worktrees").join(&w.id)),
            )
            .filter(|d| d.join("troupe-writing").exists())
            .collect();
        // No prune first: the commit and the merge below clear what the
        // kill left themselves.
        let left = ws.list().unwrap();
        eprintln!(
            "round {round}: killed after {} done, {extra}, writing {writing:?}, left {:?}",
            done.len(),
            left.iter().map(|w| &w.id).collect::<Vec<_>>()
        );
        assert_eq!(left.len(), 1, "round {round}: {left:?}");
        for info in &left {
            let wt = ws.worktree(&info.id).unwrap();
            wt.commit("after the kill").unwrap();
            let outcome = ws.merge(&wt).unwrap();
            assert!(
                !matches!(outcome, troupe_worktree::MergeOutcome::Conflict { .. }),
                "round {round}: {outcome:?}"
            );
            assert_eq!(
                snapshot(&dir.path().join("repo")),
                snapshot(wt.path()),
                "round {round}: the parent's files are not the merged worktree's"
            );
            ws.remove(&wt).unwrap();
        }
        assert!(dirty_paths(&repo).is_empty(), "round {round}");
        assert!(!repo.path().join("index.lock").exists(), "round {round}");
    }
}

/// The marker a merge of `old` into `new` killed mid-write leaves in the
/// git dir `git`.
fn killed_merge_marker(git: &Path, old: impl std::fmt::Display, new: impl std::fmt::Display) {
    std::fs::write(git.join("troupe-writing"), format!("merge {old} {new}\n")).unwrap();
}

/// Worktree `w` of `fx` with `files` written and `links` (path, target)
/// made, committed: it and its head (the parent's HEAD is still
/// `fx.head()`).
fn committed_change(
    fx: &Fixture,
    files: &[(&str, &str)],
    links: &[(&str, &str)],
) -> (troupe_worktree::Worktree, Oid) {
    let wt = fx.workspace().create_worktree("w").unwrap();
    for (path, text) in files {
        write(wt.path(), path, text);
    }
    for (path, target) in links {
        std::os::unix::fs::symlink(target, wt.path().join(path)).unwrap();
    }
    wt.commit("change").unwrap();
    let head = Oid::from_str(&wt.status().unwrap().head).unwrap();
    (wt, head)
}

/// What a merge killed mid-write leaves, made by hand so that each
/// instant is covered: the marker noting the merge, `.git/index.lock`, and
/// the parent's files partly written (index untouched, one file cut
/// short), or all written with the index updated (killed before HEAD
/// moved), or that and an added file deleted since. The merge adds a
/// symlink too. The next merge puts the files back and merges again.
#[test]
fn a_merge_killed_mid_write_is_put_back_and_done_again() {
    for state in [
        "partly written",
        "staged",
        "staged, an added file deleted since",
    ] {
        let fx = Fixture::new("trunk", &[("a.txt", "a\n"), ("keep.txt", "keep\n")]);
        let ws = fx.workspace();
        let (wt, new) = committed_change(
            &fx,
            &[
                ("a.txt", "a changed\n"),
                ("b.txt", "b\n"),
                ("sub/c.txt", "c\n"),
            ],
            &[("link", "a.txt")],
        );
        let old = fx.head();
        let git = fx.dir.path().join(".git");
        killed_merge_marker(&git, old, new);
        if state == "partly written" {
            fx.write("a.txt", "a changed\n");
            fx.write("b.txt", "b\n");
            fx.write("sub/c.txt", "");
            std::os::unix::fs::symlink("a.txt", fx.dir.path().join("link")).unwrap();
        } else {
            let mut co = git2::build::CheckoutBuilder::new();
            co.safe();
            let new_c = fx.repo.find_commit(new).unwrap();
            fx.repo
                .checkout_tree(new_c.as_object(), Some(&mut co))
                .unwrap();
            if state != "staged" {
                std::fs::remove_file(fx.dir.path().join("b.txt")).unwrap();
            }
        }
        std::fs::write(git.join("index.lock"), "").unwrap();
        assert!(!fx.dirty_paths().is_empty());

        let outcome = ws.merge(&wt).unwrap();
        assert_eq!(
            outcome,
            troupe_worktree::MergeOutcome::FastForward {
                head: new.to_string()
            },
            "{state}"
        );
        assert_eq!(fx.head(), new);
        assert_eq!(snapshot(fx.dir.path()), snapshot(wt.path()), "{state}");
        assert!(fx.dirty_paths().is_empty(), "{state}");
        assert!(!git.join("index.lock").exists() && !git.join("troupe-writing").exists());
    }
}

/// A bundle's forced checkout killed half-way (troupe-remote's `apply`
/// note) is done again by the next writer of that git dir, files and
/// index, whatever it writes.
#[test]
fn a_killed_apply_is_checked_out_again_by_the_next_writer() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    // The bundle's commit: another worktree's (its objects are in the
    // repository, as an apply unpacks them before its checkout).
    let (_, bundle) = committed_change(
        &fx,
        &[
            ("a.txt", "a from the bundle\n"),
            ("b.txt", "b from the bundle\n"),
        ],
        &[],
    );
    let target = fx.workspace().create_worktree("t").unwrap();
    let admin = fx.dir.path().join(".git/worktrees/t");
    std::fs::write(
        admin.join("troupe-writing"),
        format!("{}\n", troupe_worktree::apply_note(bundle)),
    )
    .unwrap();
    write(target.path(), "a.txt", "a from"); // cut short
    std::fs::write(admin.join("index.lock"), "").unwrap();

    // The next writer: a commit of that worktree.
    assert!(target.commit("after the kill").unwrap().is_some());
    for (file, text) in [
        ("a.txt", "a from the bundle\n"),
        ("b.txt", "b from the bundle\n"),
    ] {
        assert_eq!(
            std::fs::read_to_string(target.path().join(file)).unwrap(),
            text
        );
    }
    assert!(target.status().unwrap().is_clean());
}

/// A merge killed after HEAD moved finished: the next merge finds it done
/// and touches no file.
#[test]
fn a_merge_killed_after_head_moved_is_left_as_it_is() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    let (wt, _) = committed_change(&fx, &[("b.txt", "b\n")], &[]);
    let old = fx.head();
    ws.merge(&wt).unwrap();
    let git = fx.dir.path().join(".git");
    killed_merge_marker(&git, old, fx.head());
    // A user's edit since: not the merge's to put back.
    fx.write("b.txt", "b edited by hand\n");
    assert_eq!(
        ws.merge(&wt).unwrap(),
        troupe_worktree::MergeOutcome::UpToDate
    );
    assert_eq!(fx.read("b.txt"), "b edited by hand\n");
    assert!(!git.join("troupe-writing").exists());
}

/// A worktree commit killed mid-write left its index locked: the next
/// commit clears the lock. A lock with no marker is another git's: the
/// commit fails and says how to clear it.
#[test]
fn a_killed_commits_index_lock_is_cleared_and_a_foreign_one_is_reported() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    let wt = ws.create_worktree("w").unwrap();
    let admin = fx.dir.path().join(".git/worktrees/w");
    write(wt.path(), "b.txt", "b\n");
    std::fs::write(admin.join("index.lock"), "").unwrap();
    let e = wt.commit("change").unwrap_err();
    assert!(
        matches!(e, troupe_worktree::WorktreeError::Locked { .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("remove the stale `index.lock`"),
        "{e}"
    );

    // A killed commit: its marker, then (later or in the same tick) the
    // lock libgit2 took.
    std::fs::remove_file(admin.join("index.lock")).unwrap();
    std::fs::write(admin.join("troupe-writing"), "commit w\n").unwrap();
    std::fs::write(admin.join("index.lock"), "").unwrap();
    assert!(wt.commit("change").unwrap().is_some());
    assert!(!admin.join("index.lock").exists() && !admin.join("troupe-writing").exists());
    assert!(wt.status().unwrap().is_clean());
}

/// A file edited by hand since a merge was killed (neither side's
/// content) is not put back: the retried merge names it, and merges once
/// it is put right. The merge's other files are put back.
#[test]
fn a_file_edited_since_a_killed_merge_is_left_and_named() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    let (wt, new) = committed_change(&fx, &[("a.txt", "a changed\n"), ("b.txt", "b\n")], &[]);
    let git = fx.dir.path().join(".git");
    killed_merge_marker(&git, fx.head(), new);
    fx.write("b.txt", "b"); // cut short
    fx.write("a.txt", "mine\n"); // a person's edit since
    let e = ws.merge(&wt).unwrap_err();
    assert!(
        matches!(&e, troupe_worktree::WorktreeError::DirtyParent { files, .. } if files == &["a.txt"]),
        "{e:?}"
    );
    assert_eq!(fx.read("a.txt"), "mine\n");
    assert!(!fx.dir.path().join("b.txt").exists());
    fx.write("a.txt", "a\n");
    assert!(matches!(
        ws.merge(&wt).unwrap(),
        troupe_worktree::MergeOutcome::FastForward { .. }
    ));
    assert_eq!(snapshot(fx.dir.path()), snapshot(wt.path()));
}

/// A merge whose parent is itself a worktree (a pipeline's helpers merged
/// into its proposer's): if the kill is followed by a commit of that
/// worktree rather than a merge, the commit puts the half-written files
/// back first instead of committing them.
#[test]
fn a_commit_after_a_merge_killed_in_the_same_worktree_puts_it_back_first() {
    let fx = Fixture::new("trunk", &[("a.txt", "a\n")]);
    let ws = fx.workspace();
    let proposer = ws.create_worktree("p").unwrap();
    let inner = Workspace::open(proposer.path()).unwrap();
    let helper = inner.create_worktree("h").unwrap();
    write(helper.path(), "b.txt", "b from the helper\n");
    helper.commit("helper").unwrap();
    let old = proposer.status().unwrap().head;
    let new = helper.status().unwrap().head;
    let admin = fx.dir.path().join(".git/worktrees/p");
    killed_merge_marker(&admin, &old, &new);
    write(proposer.path(), "b.txt", "b from"); // cut short
    std::fs::write(admin.join("index.lock"), "").unwrap();

    assert_eq!(proposer.commit("proposer").unwrap(), None);
    assert_eq!(proposer.status().unwrap().head, old);
    assert!(!proposer.path().join("b.txt").exists());
    assert!(!admin.join("index.lock").exists());
    assert!(matches!(
        inner.merge(&helper).unwrap(),
        troupe_worktree::MergeOutcome::FastForward { .. }
    ));
    assert_eq!(
        std::fs::read_to_string(proposer.path().join("b.txt")).unwrap(),
        "b from the helper\n"
    );
}
