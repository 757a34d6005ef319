//! Terminal injection, through the real binary: a scripted model whose
//! text, file names and tool output carry terminal commands (OSC 0 sets
//! the title, `ESC[2J` clears the screen, OSC 52 writes the clipboard, a
//! C1 CSI). Human output shows them as visible escapes; no control byte
//! but newline and tab reaches the terminal.

use std::path::Path;

use super::assert_exit;
use super::troupe_ws;

const EVIL_PATH: &str = "evil\u{1b}]0;pwned\u{7}.txt";

fn script(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("hostile.toml");
    std::fs::write(
        &path,
        r#"
[[replies]]
kind = "message"
text = "hello \u001b]0;owned title\u0007 and \u001b[2J cleared\r\n"
tool_calls = [
  { id = "c1", name = "write_file", arguments = { path = "evil\u001b]0;pwned\u0007.txt", content = "\u001b]52;c;cm0gLXJmIH4=\u0007 clipboard\n" } },
  ]

[[replies]]
kind = "message"
tool_calls = [
  { id = "c2", name = "read_file", arguments = { path = "evil\u001b]0;pwned\u0007.txt" } },
]

[[replies]]
kind = "message"
text = "done \u009b31m red \u007f\ttab\nbye\u001b]52;c;cHduZWQ=\u0007"
"#,
    )
    .unwrap();
    path
}

/// No C0 control but `\n` and `\t`, no DEL, no C1 control.
fn assert_inert(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let bad: Vec<char> = text
        .chars()
        .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
        .collect();
    assert!(bad.is_empty(), "{what} carries {bad:?}: {text:?}");
    assert!(!bytes.contains(&0x1b), "{what}: {text:?}");
}

#[test]
fn model_text_and_file_names_cannot_drive_the_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let script = script(tmp.path());
    let out = troupe_ws(
        &["exec", "--script", script.to_str().unwrap(), "say hi"],
        &ws,
    );
    let stdout = assert_exit(&out, 0);
    // The hostile calls did run: the escapes are shown, not dropped.
    assert!(ws.join(EVIL_PATH).exists(), "the file was written");
    for shown in [
        "hello \\x1b]0;owned title\\x07 and \\x1b[2J cleared\\x0d",
        "evil\\x1b]0;pwned\\x07.txt",
        "\\x1b]52;c;cm0gLXJmIH4=\\x07 clipboard",
        "done \\u{9b}31m red \\x7f\ttab\nbye\\x1b]52;c;cHduZWQ=\\x07",
    ] {
        assert!(stdout.contains(shown), "{shown:?} not in {stdout:?}");
    }
    assert_inert("exec stdout", &out.stdout);
    assert_inert("exec stderr", &out.stderr);

    let sessions = std::fs::read_dir(ws.join(".vtcode/sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| !n.starts_with('.'))
        .unwrap();
    for args in [
        vec!["sessions", "transcript", sessions.as_str()],
        vec!["sessions", "show", sessions.as_str()],
        vec!["sessions", "list"],
    ] {
        let out = troupe_ws(&args, &ws);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_inert(&args.join(" "), &out.stdout);
    }
    let transcript = troupe_ws(&["sessions", "transcript", sessions.as_str()], &ws);
    assert!(
        String::from_utf8_lossy(&transcript.stdout).contains("\\x1b]0;owned title\\x07"),
        "{}",
        String::from_utf8_lossy(&transcript.stdout)
    );

    // --json is JSON, escaped the JSON way, and unchanged otherwise.
    let json = troupe_ws(
        &[
            "exec",
            "--json",
            "--script",
            script.to_str().unwrap(),
            "say hi",
        ],
        &ws,
    );
    assert_eq!(json.status.code(), Some(0));
    assert!(!json.stdout.contains(&0x1b));
    let json_text = String::from_utf8_lossy(&json.stdout);
    assert!(
        json_text.contains("\\u001b]0;owned title\\u0007"),
        "{json_text}"
    );
    for line in json_text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
}
