//! Protected names even when absent (issue 27), through the real binary:
//! under `workspace-write` a command cannot create `troupe.toml` at a
//! workspace root that has none (nor symlink or `mv` onto it), write
//! `.vtcode/x` or `.git/hooks/x`, nor make a `.git` where there is none;
//! nothing is left behind (the placeholders troupe made are gone after
//! the run); an ordinary new file at the root still works. Under
//! `danger-full-access` every one of these works.

use super::sandbox::{Case, exit_of};

/// The attacks on a root without `troupe.toml`, by name.
fn attacks() -> Vec<(&'static str, String)> {
    vec![
        (
            "create",
            "printf '[hooks.lifecycle]\\nsession_start = [\"touch pwned\"]\\n' > troupe.toml"
                .to_string(),
        ),
        ("symlink", "ln -s /etc/hostname troupe.toml".to_string()),
        (
            "mv",
            "echo 'x = 1' > t.toml && mv t.toml troupe.toml".to_string(),
        ),
        (
            "vtcode",
            "mkdir -p .vtcode && echo x > .vtcode/x".to_string(),
        ),
        (
            "git-hooks",
            "mkdir -p .git/hooks && echo x > .git/hooks/x".to_string(),
        ),
    ]
}

#[test]
fn absent_protected_names_cannot_be_created_in_workspace_write() {
    let case = Case::new();
    assert!(!case.ws.join("troupe.toml").exists());
    let mut commands = attacks();
    commands.push(("ordinary", "echo ok > new.txt".to_string()));
    let (code, stdout, items) = case.exec(&[], &commands, vec![]);
    assert_eq!(code, Some(0), "{stdout}");
    for (name, _) in attacks() {
        assert_ne!(
            exit_of(&items, name),
            Some(0),
            "`{name}` succeeded: {items:?}"
        );
    }
    assert_eq!(exit_of(&items, "ordinary"), Some(0), "{items:?}");
    assert_eq!(
        std::fs::read_to_string(case.ws.join("new.txt")).unwrap(),
        "ok\n"
    );
    // Nothing planted, and no placeholder left.
    assert!(case.ws.join("troupe.toml").symlink_metadata().is_err());
    assert!(!case.ws.join(".vtcode/x").exists());
    assert!(!case.ws.join(".git/hooks").exists());
    assert!(!case.ws.join("pwned").exists());
}

#[test]
fn a_workspace_without_git_cannot_get_one() {
    let case = Case::new();
    std::fs::remove_dir_all(case.ws.join(".git")).unwrap();
    let commands = vec![
        ("git-init", "git init -q .".to_string()),
        (
            "git-hooks",
            "mkdir -p .git/hooks && echo x > .git/hooks/x".to_string(),
        ),
        ("git-file", "echo 'gitdir: /tmp/evil' > .git".to_string()),
        (
            "sees",
            "test -d .git && test -z \"$(ls -A .git)\"".to_string(),
        ),
    ];
    let (code, stdout, items) = case.exec(&[], &commands, vec![]);
    assert_eq!(code, Some(0), "{stdout}");
    for name in ["git-init", "git-hooks", "git-file"] {
        assert_ne!(
            exit_of(&items, name),
            Some(0),
            "`{name}` succeeded: {items:?}"
        );
    }
    // Inside, the placeholder is an empty directory; after the run it is gone.
    assert_eq!(exit_of(&items, "sees"), Some(0), "{items:?}");
    assert!(case.ws.join(".git").symlink_metadata().is_err());
    assert!(case.ws.join("troupe.toml").symlink_metadata().is_err());
}

#[test]
fn danger_full_access_lets_the_name_attacks_through() {
    let case = Case::new();
    std::fs::remove_dir_all(case.ws.join(".git")).unwrap();
    // Each one undoes itself but the last, so the next one starts clean.
    let commands = vec![
        (
            "symlink",
            "ln -s /etc/hostname troupe.toml && test -L troupe.toml && rm troupe.toml".to_string(),
        ),
        (
            "mv",
            "echo 'x = 1' > t.toml && mv t.toml troupe.toml && rm troupe.toml".to_string(),
        ),
        (
            "vtcode",
            "mkdir -p .vtcode && echo x > .vtcode/x".to_string(),
        ),
        (
            "git-hooks",
            "mkdir -p .git/hooks && echo x > .git/hooks/x".to_string(),
        ),
        ("create", "echo 'x = 1' > troupe.toml".to_string()),
    ];
    let (code, stdout, items) = case.exec(&["--sandbox", "danger-full-access"], &commands, vec![]);
    assert_eq!(code, Some(0), "{stdout}");
    for (name, _) in &commands {
        assert_eq!(exit_of(&items, name), Some(0), "`{name}` failed: {items:?}");
    }
    assert!(case.ws.join("troupe.toml").exists());
    assert!(case.ws.join(".vtcode/x").exists());
    assert!(case.ws.join(".git/hooks/x").exists());
}

/// Many commands of one step run side by side in a workspace without
/// `troupe.toml` or `.git`: they share the placeholders (one ending never
/// removes one another still uses, which once refused some of them), each
/// runs, each is refused the name, and nothing is left.
#[test]
fn concurrent_commands_share_the_placeholders() {
    use troupe_testkit::{Reply, ToolCallSpec};
    let case = Case::new();
    std::fs::remove_dir_all(case.ws.join(".git")).unwrap();
    let calls: Vec<ToolCallSpec> = (0..24)
        .map(|i| {
            // Staggered, so commands end while others start.
            let command = format!(
                "sleep 0.{}; echo {i} >> ran.txt; echo x > troupe.toml || echo {i} >> refused.txt",
                i % 5
            );
            ToolCallSpec::new(
                format!("c{i}"),
                "exec_command",
                serde_json::json!({"command": command}),
            )
        })
        .collect();
    let (code, stdout, _) = case.exec(&[], &[], vec![Reply::tool_calls(calls)]);
    assert_eq!(code, Some(0), "{stdout}");
    let count = |file: &str| {
        std::fs::read_to_string(case.ws.join(file))
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert_eq!(count("ran.txt"), 24, "{stdout}");
    assert_eq!(count("refused.txt"), 24, "{stdout}");
    assert!(case.ws.join("troupe.toml").symlink_metadata().is_err());
    assert!(case.ws.join(".git").symlink_metadata().is_err());
}
