//! Resume does not send a key where a forged `settings.json` points: a
//! tool command can rewrite the session's settings (the write tools
//! cannot, `exec_command` can), so a recorded base URL the user did not
//! choose is refused until `--base-url` confirms it.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use troupe_test_support::wait::until;
use troupe_testkit::{Rule, Script, ScriptedServer};

use super::assert_exit;
use super::exec::session_dir;
use super::runtime;
use super::session_id;

const CANARY: &str = "sk-canary-0123456789";

fn server(rt: &tokio::runtime::Runtime) -> ScriptedServer {
    let rule = Rule::tool_calls_until("exec_command", 6)
        .with_arguments(serde_json::json!({"command": "echo step {n} >> steps.txt"}))
        .with_final_text("done after {tool_results} tool results")
        .with_delay_ms(60);
    rt.block_on(ScriptedServer::start(Script::rule(rule)))
        .unwrap()
}

/// `troupe ARGS` in `ws` with the user's URL in `TROUPE_BASE_URL` and,
/// when `key`, the canary as `OPENAI_API_KEY`.
fn troupe(ws: &Path, user_url: &str, key: bool, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    troupe_test_support::trust::isolated(&mut cmd);
    // `--workspace` goes with the first subcommand (`exec --workspace W
    // resume ...`, `sessions resume ID --workspace W`).
    let (head, rest) = args.split_at(if args[0] == "exec" { 1 } else { args.len() });
    cmd.args(head)
        .args(["--workspace", ws.to_str().unwrap()])
        .args(rest)
        .current_dir(ws)
        .env("TROUPE_LOG", "warn")
        .env("TROUPE_BASE_URL", user_url)
        .env_remove("CODEX_API_KEY")
        .env_remove("TROUPE_MODEL")
        .env_remove("AWS_SECRET_ACCESS_KEY");
    if key {
        cmd.env("OPENAI_API_KEY", CANARY);
    } else {
        cmd.env_remove("OPENAI_API_KEY");
    }
    cmd
}

fn output(mut cmd: Command, what: &str) -> Output {
    let out = cmd.output().unwrap();
    super::vtcode::check_output(&out, what);
    out
}

/// A session of `troupe exec` against `user_url`, killed with SIGKILL
/// once two of its commands ran; its id.
fn crashed_session(ws: &Path, user_url: &str) -> String {
    let mut child = troupe(ws, user_url, true, &["exec", "--model", "scripted"])
        .arg("count to six")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until(Duration::from_secs(60), "the session's two steps", || {
        let steps = std::fs::read_to_string(ws.join("steps.txt")).unwrap_or_default();
        (steps.lines().count() >= 2).then_some(())
    });
    child.kill().unwrap(); // SIGKILL
    assert!(!child.wait().unwrap().success(), "finished before the kill");
    let dir = session_dir(ws);
    dir.file_name().unwrap().to_str().unwrap().to_string()
}

/// Rewrites the session's settings.json as a tool command could.
fn forge(ws: &Path, change: impl FnOnce(&mut serde_json::Value)) {
    let path = session_dir(ws).join("settings.json");
    let mut settings: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(&mut settings);
    std::fs::write(&path, serde_json::to_vec_pretty(&settings).unwrap()).unwrap();
}

fn host_of(url: &str) -> &str {
    url.split("://").nth(1).unwrap().split('/').next().unwrap()
}

fn assert_refused(out: &Output, host: &str, secret: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("troupe: "), "{stderr}");
    assert!(lines[0].contains(host), "names the host: {stderr}");
    assert!(lines[0].contains(secret), "names the variable: {stderr}");
    assert!(
        lines[0].contains("--base-url"),
        "says how to confirm: {stderr}"
    );
    assert!(!stderr.contains(CANARY) && !String::from_utf8_lossy(&out.stdout).contains(CANARY));
}

#[test]
fn forged_base_url_gets_no_key_until_the_user_confirms_it() {
    let rt = runtime();
    let user = server(&rt);
    let attacker = server(&rt);
    let ws = tempfile::tempdir().unwrap();
    let id = crashed_session(ws.path(), &user.openai_base_url());
    assert!(user.requests().iter().all(|r| r.has_auth));
    forge(ws.path(), |s| {
        s["base_url"] = attacker.openai_base_url().into()
    });

    let resume = ["sessions", "resume", id.as_str()];
    let out = output(
        troupe(ws.path(), &user.openai_base_url(), true, &resume),
        "resume",
    );
    assert_refused(&out, host_of(&attacker.openai_base_url()), "OPENAI_API_KEY");
    assert_eq!(attacker.request_count(), 0, "the attacker got a request");
    let manifest = std::fs::read_to_string(session_dir(ws.path()).join("manifest.json")).unwrap();
    assert!(manifest.contains("\"active\""), "{manifest}");

    // The user names the same URL: that is their choice, and it runs.
    let mut cmd = troupe(ws.path(), &user.openai_base_url(), true, &resume);
    cmd.args(["--base-url", &attacker.openai_base_url()]);
    let out = output(cmd, "resume --base-url");
    assert_exit(&out, 0);
    assert!(attacker.request_count() > 0);
    assert!(attacker.requests().iter().all(|r| r.has_auth));
}

#[test]
fn a_forged_provider_cannot_aim_another_variable_at_a_url() {
    let rt = runtime();
    let user = server(&rt);
    let attacker = server(&rt);
    let ws = tempfile::tempdir().unwrap();
    // The user's own table: a key in an unusual variable, for its own URL.
    std::fs::write(
        ws.path().join("troupe.toml"),
        format!(
            "[providers.corp]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"AWS_SECRET_ACCESS_KEY\"\n",
            user.openai_base_url()
        ),
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let id = crashed_session(ws.path(), &user.openai_base_url());
    let resume = ["sessions", "resume", id.as_str()];
    for url in [
        attacker.openai_base_url(),
        "https://api.openai.com/v1".into(),
    ] {
        forge(ws.path(), |s| {
            s["provider"] = "corp".into();
            s["base_url"] = url.clone().into();
        });
        let mut cmd = troupe(ws.path(), &user.openai_base_url(), true, &resume);
        cmd.env("AWS_SECRET_ACCESS_KEY", CANARY);
        let out = output(cmd, "resume");
        assert_refused(&out, host_of(&url), "AWS_SECRET_ACCESS_KEY");
    }
    assert_eq!(attacker.request_count(), 0);
}

#[test]
fn exec_resume_refuses_too_and_no_key_needs_no_confirmation() {
    let rt = runtime();
    let user = server(&rt);
    let attacker = server(&rt);
    let ws = tempfile::tempdir().unwrap();
    let mut first = troupe(
        ws.path(),
        &user.openai_base_url(),
        true,
        &["exec", "--model", "scripted"],
    );
    first.arg("count to six");
    let out = output(first, "exec");
    assert_exit(&out, 0);
    let id = session_id(ws.path());
    forge(ws.path(), |s| {
        s["base_url"] = attacker.openai_base_url().into()
    });
    let again = ["exec", "resume", id.as_str(), "and again"];
    let out = output(
        troupe(ws.path(), &user.openai_base_url(), true, &again),
        "exec resume",
    );
    assert_refused(&out, host_of(&attacker.openai_base_url()), "OPENAI_API_KEY");
    assert_eq!(attacker.request_count(), 0);

    // No key set: nothing secret would leave, so no confirmation.
    let out = output(
        troupe(ws.path(), &user.openai_base_url(), false, &again),
        "exec resume",
    );
    assert_exit(&out, 0);
    assert!(attacker.request_count() > 0);
    assert!(attacker.requests().iter().all(|r| !r.has_auth));
}

#[test]
fn secret_headers_count_as_a_key() {
    let rt = runtime();
    let user = server(&rt);
    let attacker = server(&rt);
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        format!("[providers.openai]\nheaders = {{ \"x-team-token\" = \"{CANARY}\" }}\n"),
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(ws.path());
    let id = crashed_session(ws.path(), &user.openai_base_url());
    forge(ws.path(), |s| {
        s["base_url"] = attacker.openai_base_url().into()
    });
    let resume = ["sessions", "resume", id.as_str()];
    let out = output(
        troupe(ws.path(), &user.openai_base_url(), false, &resume),
        "resume",
    );
    assert_refused(&out, host_of(&attacker.openai_base_url()), "headers");
    assert_eq!(attacker.request_count(), 0);
}
