//! Hooks run in the agents' sandbox (issue 27), through the real binary:
//! a `troupe.toml` hook cannot write outside the workspace under the
//! default `workspace-write`, unless its entry says `sandbox = "none"`
//! (the table form); under `danger-full-access` it can.

use super::sandbox::Case;

/// A workspace whose hooks write `default.txt` (string entry) and
/// `none.txt` (`sandbox = "none"`) in `outside`, and `inside.txt` in the
/// workspace; after `troupe exec` with `args`, which of them exist.
fn hooks(args: &[&str]) -> (bool, bool, bool) {
    let case = Case::new();
    let out = case.outside.display();
    std::fs::write(
        case.ws.join("troupe.toml"),
        format!(
            "[hooks.lifecycle]\n\
             session_start = [\"echo x > {out}/default.txt\", \"echo ok > inside.txt\"]\n\n\
             [[hooks.lifecycle.stop]]\ncommand = \"echo x > {out}/none.txt\"\nsandbox = \"none\"\n\n\
             [[hooks.lifecycle.stop]]\ncommand = \"echo x > {out}/stop-default.txt\"\n"
        ),
    )
    .unwrap();
    troupe_test_support::trust::trust_fixture(&case.ws);
    let (code, stdout, _) = case.exec(args, &[], vec![]);
    assert_eq!(code, Some(0), "{stdout}");
    let default = case.outside.join("default.txt").exists();
    assert_eq!(default, case.outside.join("stop-default.txt").exists());
    (
        default,
        case.outside.join("none.txt").exists(),
        case.ws.join("inside.txt").exists(),
    )
}

#[test]
fn a_hook_cannot_write_outside_the_workspace_unless_configured_to() {
    assert_eq!(hooks(&[]), (false, true, true));
}

#[test]
fn under_danger_full_access_a_hook_writes_anywhere() {
    assert_eq!(
        hooks(&["--sandbox", "danger-full-access"]),
        (true, true, true)
    );
}
