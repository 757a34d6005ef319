//! Every error is one `troupe:` line with a documented exit code (issue 10,
//! section 3): usage errors, parse errors, bad scripts, `--listen`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::truth::{bin, example};
use super::{stderr, stdout};

/// Runs `args` in `cwd`; asserts exit 2 and one `troupe:` line on stderr,
/// nothing on stdout; returns the line.
fn refused(args: &[&str], cwd: &Path) -> String {
    let out = bin(args, cwd).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(stdout(&out), "", "{args:?}");
    assert!(
        err.starts_with("troupe: ") && err.ends_with('\n') && err.lines().count() == 1,
        "{args:?}: not one troupe: line: {err:?}"
    );
    err.trim_end().to_string()
}

#[test]
fn usage_errors_are_one_line_and_help_still_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let e = refused(&["exec", "--max-turns", "-1", "hi"], dir);
    assert!(
        e.contains("--max-turns") && e.contains("must be a positive integer"),
        "{e}"
    );
    assert!(!e.contains("-- -1"), "{e}");
    let e = refused(&["exec", "--max-turns", "0", "hi"], dir);
    assert!(e.contains("must be a positive integer"), "{e}");
    let e = refused(&["exec", "--max-budget-usd", "-2", "hi"], dir);
    assert!(e.contains("positive amount"), "{e}");
    // No prompt argument reads it from stdin (as the Codex SDK sends it);
    // an empty stdin is refused in one line.
    let e = refused(&["exec"], dir);
    assert!(e.contains("the prompt is empty"), "{e}");
    let e = refused(&["no-such-command"], dir);
    assert!(e.contains("no-such-command"), "{e}");
    let e = refused(&["exec", "--max-turn", "3", "x"], dir);
    assert!(e.contains("--max-turns"), "clap's tip is kept: {e}");

    for args in [&["--help"][..], &["exec", "--help"], &["--version"]] {
        let out = bin(args, dir).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(stdout(&out).lines().count() >= 1, "{args:?}");
        assert_eq!(stderr(&out), "", "{args:?}");
    }
    let help = stdout(&bin(&["exec", "--help"], dir).output().unwrap());
    assert!(help.lines().count() > 5, "help is not folded: {help}");
}

#[test]
fn parse_errors_name_the_file_line_column_and_the_closest_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    troupe_test_support::git::repo_at(dir, "initial", &[]);
    std::fs::write(
        dir.join("p.toml"),
        "[pipeline]\nname = \"x\"\nmax_round = 2\n[[proposers]]\nname = \"a\"\ntask = \"t\"\n",
    )
    .unwrap();
    let e = refused(&["run", "p.toml"], dir);
    assert_eq!(
        e,
        "troupe: p.toml:3:1: unknown field `max_round`, expected one of `name`, `max_rounds`, `verifier_model`, `checks`, `check_timeout_sec`, `merge_blocked`; did you mean `max_rounds`?"
    );
    std::fs::write(dir.join("q.toml"), "[pipeline\n").unwrap();
    let e = refused(&["run", "q.toml"], dir);
    assert!(e.starts_with("troupe: q.toml:1:10: "), "{e}");

    std::fs::write(dir.join("s.toml"), "[[replys]]\nkind = \"message\"\n").unwrap();
    let e = refused(&["exec", "--script", "s.toml", "hi"], dir);
    assert!(e.contains("s.toml:1:3: unknown field `replys`"), "{e}");
    assert!(e.ends_with("did you mean `replies`?"), "{e}");
    std::fs::write(dir.join("s.json"), "{\"replys\": []}").unwrap();
    let e = refused(&["mock-llm", "--script", "s.json"], dir);
    assert!(e.contains("s.json:1:9: unknown field `replys`"), "{e}");
    assert!(e.ends_with("did you mean `replies`?"), "{e}");
}

#[test]
fn an_empty_script_is_refused_at_once_by_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    troupe_test_support::git::repo_at(dir, "initial", &[]);
    std::fs::write(
        dir.join("p.toml"),
        "[[proposers]]\nname = \"a\"\ntask = \"t\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("empty.toml"), "").unwrap();
    std::fs::write(dir.join("comments.toml"), "# only a comment\n").unwrap();
    std::fs::write(dir.join("empty.json"), "[]").unwrap();
    for script in ["empty.toml", "comments.toml", "empty.json"] {
        for args in [
            vec!["exec", "--script", script, "hi"],
            vec!["run", "p.toml", "--script", script],
            vec!["mock-llm", "--script", script],
        ] {
            let started = Instant::now();
            let e = refused(&args, dir);
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "{args:?} retried"
            );
            assert!(e.contains(script) && e.contains("scripts no answer"), "{e}");
        }
    }
    assert!(
        !dir.join(".vtcode/sessions").exists(),
        "a refused script left a session"
    );
}

#[test]
fn a_missing_script_gets_the_same_message_from_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    troupe_test_support::git::repo_at(dir, "initial", &[]);
    std::fs::write(
        dir.join("p.toml"),
        "[[proposers]]\nname = \"a\"\ntask = \"t\"\n",
    )
    .unwrap();
    let expected = "troupe: script nope.toml is not a readable file; pass --script PATH to a JSON or TOML script (docs/scripted-server.md)";
    for args in [
        vec!["exec", "--script", "nope.toml", "hi"],
        vec!["run", "p.toml", "--script", "nope.toml"],
        vec!["mock-llm", "--script", "nope.toml"],
    ] {
        assert_eq!(refused(&args, dir), expected, "{args:?}");
    }
    // A directory is not a script either.
    std::fs::create_dir(dir.join("nope.toml")).unwrap();
    assert_eq!(
        refused(&["exec", "--script", "nope.toml", "hi"], dir),
        expected
    );
}

#[test]
fn mock_llm_listens_on_localhost_and_refuses_other_hosts() {
    let tmp = tempfile::tempdir().unwrap();
    let script = example("hello.toml");
    let mut child = bin(
        &["mock-llm", "--script", &script, "--listen", "localhost:0"],
        tmp.path(),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        first.starts_with("listening on http://127.0.0.1:"),
        "{first:?}"
    );
    let e = refused(
        &["mock-llm", "--script", &script, "--listen", "0.0.0.0:0"],
        tmp.path(),
    );
    assert!(e.contains("not a loopback address"), "{e}");
    let e = refused(
        &["mock-llm", "--script", &script, "--listen", "no-port"],
        tmp.path(),
    );
    assert!(e.contains("HOST:PORT"), "{e}");
}
