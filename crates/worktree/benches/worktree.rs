//! Worktree create + remove on a generated 5,000-file repository: troupe
//! (libgit2) against `git worktree add` / `git worktree remove`, in the same
//! run, alternating which goes first.
//!
//! `cargo bench -p troupe-worktree --bench worktree [-- ROUNDS [FILES [troupe|git]]]`
//! (the third argument runs one side only, for profiling).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use git2::{IndexAddOption, Repository, RepositoryInitOptions, Signature};
use troupe_worktree::Workspace;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rounds: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(15);
    let files: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5000);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    let t = Instant::now();
    generate(&root, files);
    println!(
        "generated {files} files in {:.2?}; {rounds} rounds of create+remove",
        t.elapsed()
    );
    let ws = Workspace::open(&root).unwrap();
    let only = args.get(2).map(String::as_str);
    let git = only != Some("troupe") && git_available();
    if !git {
        println!("git CLI not found: skipping the baseline");
    }
    // One warm-up of each, not measured.
    if only != Some("git") {
        troupe_round(&ws, "warm");
    }
    if git {
        git_round(&root, "gitwarm");
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let run_ours =
            |v: &mut Vec<(Duration, Duration)>| v.push(troupe_round(&ws, &format!("t{i}")));
        let run_git =
            |v: &mut Vec<(Duration, Duration)>| v.push(git_round(&root, &format!("g{i}")));
        if only == Some("git") {
            run_git(&mut theirs);
            continue;
        }
        if i % 2 == 0 || !git {
            run_ours(&mut ours);
            if git {
                run_git(&mut theirs);
            }
        } else {
            run_git(&mut theirs);
            run_ours(&mut ours);
        }
    }
    if !ours.is_empty() {
        report("troupe", &ours);
    }
    if !theirs.is_empty() {
        report("git CLI", &theirs);
    }
    if !ours.is_empty() && !theirs.is_empty() {
        let total = |v: &[(Duration, Duration)]| median(v.iter().map(|(a, b)| *a + *b).collect());
        let ratio = total(&ours).as_secs_f64() / total(&theirs).as_secs_f64();
        println!("ratio troupe/git (median create+remove): {ratio:.2}x (goal <= 1.0x)");
    }
}

/// A repository with `n` files of ~1 KiB in 50 directories, one commit.
fn generate(root: &Path, n: usize) {
    let mut opts = RepositoryInitOptions::new();
    opts.initial_head("trunk");
    let repo = Repository::init_opts(root, &opts).unwrap();
    for i in 0..n {
        let path = root.join(format!("src/m{}/file{i}.rs", i % 50));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("// file {i}\nfn f() {{}}\n").repeat(40)).unwrap();
    }
    let mut index = repo.index().unwrap();
    index.add_all(["*"], IndexAddOption::DEFAULT, None).unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = Signature::now("bench", "bench@localhost").unwrap();
    repo.commit(Some("HEAD"), &sig, &sig, "files", &tree, &[])
        .unwrap();
}

fn troupe_round(ws: &Workspace, id: &str) -> (Duration, Duration) {
    let t = Instant::now();
    let wt = ws.create_worktree(id).unwrap();
    let created = t.elapsed();
    let t = Instant::now();
    ws.remove(&wt).unwrap();
    (created, t.elapsed())
}

fn git_round(root: &Path, id: &str) -> (Duration, Duration) {
    let path = format!(".vtcode/worktrees/{id}");
    let branch = format!("troupe/{id}");
    let t = Instant::now();
    git(root, &["worktree", "add", "-q", "-b", &branch, &path]);
    let created = t.elapsed();
    let t = Instant::now();
    git(root, &["worktree", "remove", &path]);
    let removed = t.elapsed();
    // Not timed (in troupe's favour of git): `remove` deletes the branch too.
    git(root, &["branch", "-q", "-D", &branch]);
    (created, removed)
}

fn git(root: &Path, args: &[&str]) {
    let st = Command::new("git")
        .current_dir(root)
        .args(args)
        .status()
        .unwrap();
    assert!(st.success(), "git {args:?} failed");
}

fn git_available() -> bool {
    Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn report(name: &str, v: &[(Duration, Duration)]) {
    let create = median(v.iter().map(|p| p.0).collect());
    let remove = median(v.iter().map(|p| p.1).collect());
    let total = median(v.iter().map(|p| p.0 + p.1).collect());
    println!(
        "{name:>18}: create {:>8.1} ms  remove {:>8.1} ms  create+remove {:>8.1} ms",
        ms(create),
        ms(remove),
        ms(total)
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
