//! Scripted runs that several test files share: a model that runs one
//! shell step after another, so a run lasts long enough to be killed,
//! steered or resumed in the middle, and leaves one line per step that
//! ran in `steps.txt` ([`steps_taken`]).

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use troupe_testkit::{Reply, Rule, Script};

use crate::wait::{WaitTimeout, wait_until_blocking};

/// The command every step runs (in the workspace).
pub const STEP_COMMAND: &str = "echo step {n} >> steps.txt";

/// The file the steps append to, in the workspace.
pub const STEPS_FILE: &str = "steps.txt";

/// A model that calls `exec_command` with [`STEP_COMMAND`] until `k` tool
/// results are in the conversation, then answers
/// `done after K tool results` ([`steps_done`]); each reply comes after
/// `delay_ms`.
pub fn steps_rule(k: usize, delay_ms: u64) -> Rule {
    Rule::tool_calls_until("exec_command", k)
        .with_arguments(serde_json::json!({ "command": STEP_COMMAND }))
        .with_delay_ms(delay_ms)
}

/// [`steps_rule`] as a script file's text (TOML, docs/scripted-server.md),
/// for `troupe exec --script` or a `troupe serve` session's `script`.
pub fn steps_script_toml(k: usize, delay_ms: u64) -> String {
    format!(
        "[rule]\ntool = \"exec_command\"\narguments = {{ command = \"{STEP_COMMAND}\" }}\nuntil_tool_results = {k}\nfinal_text = \"done after {{tool_results}} tool results\"\ndelay_ms = {delay_ms}\n"
    )
}

/// The final answer of a [`steps_rule`] run that saw `k` tool results.
pub fn steps_done(k: usize) -> String {
    format!("done after {k} tool results")
}

/// How many steps ran in workspace `ws` (lines of [`STEPS_FILE`]; none
/// when it does not exist yet).
pub fn steps_taken(ws: &Path) -> usize {
    std::fs::read_to_string(ws.join(STEPS_FILE)).map_or(0, |s| s.lines().count())
}

/// Waits (blocking, at most `timeout`) until at least `n` steps ran in
/// workspace `ws`.
pub fn wait_for_steps(ws: &Path, n: usize, timeout: Duration) -> Result<(), WaitTimeout> {
    wait_until_blocking(
        &format!("{n} steps to run in {}", ws.display()),
        timeout,
        || steps_taken(ws) >= n,
    )
}

/// One step of four calls that try to leave the workspace: `read_file` of
/// `../secret.txt` (`dotdot`), of `outside/secret.txt` by absolute path
/// (`abs`), through the symlink `link` to `outside` (`sym`), and
/// `write_file` through it (`symw`).
pub fn escape_attempts(outside: &Path) -> troupe_testkit::Reply {
    use troupe_testkit::{Reply, ToolCallSpec};
    Reply::tool_calls(vec![
        ToolCallSpec::new(
            "dotdot",
            "read_file",
            serde_json::json!({"path": "../secret.txt"}),
        ),
        ToolCallSpec::new(
            "abs",
            "read_file",
            serde_json::json!({"path": outside.join("secret.txt")}),
        ),
        ToolCallSpec::new(
            "sym",
            "read_file",
            serde_json::json!({"path": "link/secret.txt"}),
        ),
        ToolCallSpec::new(
            "symw",
            "write_file",
            serde_json::json!({"path": "link/new.txt", "content": "x"}),
        ),
    ])
}

/// Depth-2 subagents: the root (a task marked `ROOT-3`) spawns `a`, which
/// spawns `b`, which runs `command` in the workspace; each answers once
/// its child has. Each agent's route is picked by a marker of its task (a
/// child's orientation quotes its parents' tasks, so the deepest route
/// comes first).
pub fn depth_two_script(command: &str) -> Script {
    Script::replies(vec![])
        .with_route(
            "GRAND-7",
            vec![
                Reply::tool_call("g1", "exec_command", json!({ "command": command })),
                Reply::text("grandchild done"),
            ],
        )
        .with_route(
            "CHILD-5",
            vec![
                Reply::tool_call(
                    "c1",
                    "spawn_subagent",
                    json!({"name": "b", "task": "GRAND-7: run the command."}),
                ),
                Reply::text("child done"),
            ],
        )
        .with_route(
            "ROOT-3",
            vec![
                Reply::tool_call(
                    "r1",
                    "spawn_subagent",
                    json!({"name": "a", "task": "CHILD-5: have the command run."}),
                ),
                Reply::text("root done"),
            ],
        )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use troupe_testkit::Script;

    #[test]
    fn the_toml_script_is_the_rule() {
        let toml = Script::from_toml_str(&steps_script_toml(7, 40)).unwrap();
        assert_eq!(toml, Script::rule(steps_rule(7, 40)));
        let rule = steps_rule(3, 0);
        assert_eq!(rule.until_tool_results, 3);
        assert_eq!(
            rule.final_text.replace("{tool_results}", "3"),
            steps_done(3)
        );
    }
}
