//! No provider key within a tool's reach, through the real binary: troupe
//! runs against a scripted server with `OPENAI_API_KEY` set to a random
//! canary, and a hostile model's `exec_command` calls try every route to
//! it a process of the same user (here, root) has: troupe's and each
//! ancestor's `/proc/PID/environ` and `cmdline`, troupe's memory through
//! `/proc/PID/maps` and `mem`, troupe's and the command's own open
//! descriptors, and every file under the workspace and the temp dir. The
//! canary must appear nowhere: not on stdout or stderr, in no file of the
//! workspace (the session directory included), in no request body the
//! server recorded (its `Authorization` header carries it, as it must).

use std::path::Path;

use serde_json::json;
use troupe_testkit::{Reply, Script, ToolCallSpec};

use super::{assert_exit, scripted_run};
use crate::exec::{Server, exec_cmd};

/// troupe's environment, then each ancestor's environment and command
/// line, up to pid 1. Only what looks like a key is printed (a failing
/// test shows it; the rest of the environment is not its business).
const ENVIRON: &str = r#"keys() { tr '\0' '\n' | grep -o 'sk-canary-[0-9a-z]*\|[a-z ]* rc=[0-9]*'; }
{ cat /proc/$PPID/environ; echo " troupe environ rc=$?"; } | keys
p=$PPID
while [ "$p" -gt 1 ]; do
  echo "== ancestor $p"
  { cat /proc/$p/environ; echo " environ rc=$?"; } | keys
  { cat /proc/$p/cmdline; echo " cmdline rc=$?"; } | keys
  p=$(awk '/^PPid:/ {print $2}' /proc/$p/status)
done"#;

/// troupe's memory, every mapped range, printing whatever looks like a key.
const MEM: &str = r#"TROUPE_PID=$PPID python3 - <<'PY'
import os, re
pid = int(os.environ["TROUPE_PID"])
try:
    maps = open(f"/proc/{pid}/maps").read().splitlines()
    print("maps readable:", len(maps))
except OSError as e:
    print("maps:", e)
    maps = []
try:
    mem = open(f"/proc/{pid}/mem", "rb")
except OSError as e:
    print("mem:", e)
    mem = None
found = 0
for line in maps if mem else []:
    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
    try:
        mem.seek(lo)
        data = mem.read(min(hi - lo, 1 << 26))
    except (OSError, ValueError, OverflowError):
        continue
    for m in re.finditer(rb"sk-canary-[0-9a-z]+", data):
        found += 1
        print("FOUND", m.group().decode())
print("mem done, found", found)
PY"#;

/// troupe's descriptors and the command's own, each read for a moment.
const FDS: &str = r#"ls -l /proc/$PPID/fd; readlink /proc/$PPID/fd/0; echo "troupe fd link rc=$?"
for f in /proc/$PPID/fd/* /proc/$$/fd/*; do
  echo "== $f"; timeout 1 cat "$f" | head -c 65536 | tr '\0' '\n' | grep -ao 'sk-canary-[0-9a-z]*'
done; ls -l /proc/$$/fd"#;

/// Every file under the workspace and the temp dir that mentions a key.
const FILES: &str = r#"timeout 60 grep -rIoh 'sk-canary-[0-9a-z]*' . /tmp /dev/shm 2>/dev/null | sort -u | head -100; echo "grep done""#;

/// One reply calling every route, call ids prefixed with `prefix`.
fn routes(prefix: &str) -> Reply {
    let call = |id: &str, command: &str| {
        ToolCallSpec::new(
            format!("{prefix}{id}"),
            "exec_command",
            json!({ "command": command, "timeout_ms": 90_000 }),
        )
    };
    Reply::tool_calls(vec![
        call("environ", ENVIRON),
        call("mem", MEM),
        call("fds", FDS),
        call("files", FILES),
    ])
}

fn script() -> Vec<Reply> {
    vec![routes(""), Reply::text("nothing found")]
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let bytes = std::fs::read(&path).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    hits.push(path.display().to_string());
                }
            }
        }
    }
    hits
}

/// Runs the hostile script against troupe with the canary as its key,
/// as `uid` when given (troupe started through `setpriv`), and checks that
/// every route ran and the canary is nowhere.
fn attack(uid: Option<u32>) {
    let canary = format!("sk-canary-{:016x}", fastrand::u64(..));
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(script());
    let mut cmd = exec_cmd(ws.path(), &s.url(), &["--json"], "look around");
    cmd.env("OPENAI_API_KEY", &canary);
    if let Some(uid) = uid {
        std::os::unix::fs::chown(ws.path(), Some(uid), Some(uid)).unwrap();
        let program = cmd.get_program().to_owned();
        let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
        let mut wrapped = std::process::Command::new("setpriv");
        wrapped
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .arg(program)
            .args(args)
            .current_dir(ws.path())
            .env("TROUPE_LOG", "warn")
            .env("HOME", ws.path())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("OPENAI_API_KEY", &canary)
            .env_remove("TROUPE_MODEL")
            .env_remove("AGENT_MAX_TURNS_PER_REQUEST");
        cmd = wrapped;
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");

    let reqs = s.server.requests();
    assert_eq!(
        reqs.len(),
        2,
        "one request for the calls, one for the results"
    );
    check(&reqs[1], "", &canary);
    assert_nowhere(&canary, &stdout, &stderr, ws.path(), &s);
}

/// Each route of `request`'s tool results (ids prefixed with `prefix`)
/// ran, and hit a wall at troupe's /proc files.
fn check(request: &troupe_testkit::RecordedRequest, prefix: &str, canary: &str) {
    let results = request.tool_results();
    let output = |id: &str| {
        let id = format!("{prefix}{id}");
        results
            .iter()
            .find(|r| r.call_id == id)
            .map(|r| r.output.clone())
            .unwrap_or_else(|| panic!("no result for {id}"))
    };
    let environ = output("environ");
    assert!(environ.contains("troupe environ rc=1"), "{environ}");
    assert!(environ.contains("== ancestor"), "{environ}");
    let mem = output("mem");
    assert!(mem.contains("mem done, found 0"), "{mem}");
    assert!(!mem.contains("maps readable"), "{mem}");
    let fds = output("fds");
    assert!(fds.contains("troupe fd link rc=1"), "{fds}");
    assert!(output("files").contains("grep done"));
    for r in &results {
        assert!(!r.output.contains(canary), "{}: {}", r.call_id, r.output);
    }
}

/// The canary is not on stdout or stderr, in no file under `ws`, and in
/// no request body; every request carried a credential.
fn assert_nowhere(canary: &str, stdout: &str, stderr: &str, ws: &Path, s: &Server) {
    assert!(!stdout.contains(canary), "the key on stdout: {stdout}");
    assert!(!stderr.contains(canary), "the key on stderr: {stderr}");
    let files = files_holding(ws, canary.as_bytes());
    assert!(files.is_empty(), "the key in {files:?}");
    let reqs = s.server.requests();
    assert!(
        reqs.iter().all(|r| r.has_auth),
        "the key was sent as the credential"
    );
    for r in &reqs {
        let body = r.body.to_string();
        assert!(
            !body.contains(canary),
            "the key in request {}: {body}",
            r.index
        );
    }
}

/// As whoever runs the tests (root in CI: then the tool's missing
/// capabilities are what stops it).
#[test]
fn a_tool_cannot_read_troupes_key_by_any_route() {
    attack(None);
}

/// As an ordinary user (nobody), whose tools hold the same (no)
/// capabilities as troupe: only troupe being non-dumpable stops them.
/// Needs root to switch user; elsewhere the test above is this case.
#[test]
#[ignore = "needs root"]
fn a_tool_of_an_ordinary_user_cannot_read_troupes_key() {
    use std::os::unix::fs::MetadataExt as _;
    // /proc/self belongs to this process's effective user.
    assert_eq!(
        std::fs::metadata("/proc/self").unwrap().uid(),
        0,
        "needs root to run troupe as another user"
    );
    attack(Some(65534));
}

/// The verifier (Landlock-sandboxed, read-only) tries the same routes
/// from its `exec_command` during `troupe run`.
#[test]
fn the_verifier_cannot_read_troupes_key_either() {
    let canary = format!("sk-canary-{:016x}", fastrand::u64(..));
    let ws = tempfile::tempdir().unwrap();
    troupe_test_support::git::repo_at(ws.path(), "initial", &[("calc.sh", "echo 5\n")]);
    std::fs::write(
        ws.path().join("p.toml"),
        "[pipeline]\nmax_rounds = 1\n[[proposers]]\nname = \"fixer\"\ntask = \"Fix calc.sh.\"\n",
    )
    .unwrap();
    let handoff = json!({"state_summary": "ready for review", "boundary_status": [{"name": "fix", "status": "done"}], "modified_files": ["calc.sh"]});
    // It cites no check: its routes are evidence in the log already.
    let verdict = json!({"approved": true});
    let script = Script::replies(vec![])
        .with_route(
            "ready for review",
            vec![
                routes("v-"),
                Reply::tool_call("v-verdict", "submit_verdict", verdict),
                Reply::text("approved"),
            ],
        )
        .with_route(
            "Fix calc.sh",
            vec![
                Reply::tool_call(
                    "p1",
                    "write_file",
                    json!({"path": "calc.sh", "content": "echo 4\n"}),
                ),
                Reply::tool_call("p2", "handoff", handoff),
                Reply::text("fixed"),
            ],
        );
    let s = Server::with_script(script);
    let out = scripted_run(ws.path(), &s.url())
        .env("OPENAI_API_KEY", &canary)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let reqs = s.server.requests();
    let after_routes = reqs
        .iter()
        .find(|r| r.tool_results().iter().any(|t| t.call_id == "v-environ"))
        .expect("the verifier's routes were answered");
    check(after_routes, "v-", &canary);
    assert_nowhere(&canary, &stdout, &stderr, ws.path(), &s);
}

/// troupe's initial environment (what `/proc/PID/environ` shows, to
/// anyone allowed to read it) holds no key: troupe re-executed itself
/// without it, and still sends it to the provider. Read here by the test
/// itself, as root with `CAP_SYS_PTRACE`, while a tool command runs.
#[test]
#[ignore = "needs root"]
fn troupes_initial_environment_holds_no_key() {
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(
        std::fs::metadata("/proc/self").unwrap().uid(),
        0,
        "needs root to read a non-dumpable process's environ"
    );
    let canary = format!("sk-canary-{:016x}", fastrand::u64(..));
    let ws = tempfile::tempdir().unwrap();
    let s = Server::start(vec![
        Reply::tool_call("c1", "exec_command", json!({"command": "sleep 2"})),
        Reply::text("done"),
    ]);
    let child = exec_cmd(ws.path(), &s.url(), &["--json"], "wait")
        .env("OPENAI_API_KEY", &canary)
        .env("SOME_TOKEN", "tok-canary")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    troupe_test_support::wait_until_blocking(
        "the first model request",
        std::time::Duration::from_secs(20),
        || !s.server.requests().is_empty(),
    )
    .unwrap();
    let environ = std::fs::read(format!("/proc/{}/environ", child.id())).unwrap();
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 0);
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ.contains("TROUPE_LOG=warn"),
        "the environment was read"
    );
    assert!(!environ.contains(&canary), "the key in troupe's environ");
    assert!(
        !environ.contains("tok-canary"),
        "a token in troupe's environ"
    );
    assert!(!String::from_utf8_lossy(&cmdline).contains(&canary));
    let reqs = s.server.requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs.iter().all(|r| r.has_auth),
        "the key still reached the provider"
    );
}
