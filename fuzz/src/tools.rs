//! Tool-argument decoding: a model's arguments string for one of the
//! built-in tools, through [`ToolRegistry::validate`] (size limit, JSON
//! parse, the tool's JSON Schema) and, when valid, the permission check
//! against a policy with path and command globs
//! ([`ToolRegistry::check_permission_in`], which canonicalizes paths in a
//! scratch workspace) and the typed reads the tools make.
//!
//! Input layout: byte 0 picks the tool (the built-in ones and one unknown
//! name), the rest is the arguments text (UTF-8 only: providers hand
//! arguments over as strings).

use std::sync::OnceLock;

use troupe_runtime::tools::{PermissionPolicy, ToolError, ToolRegistry, args};

fn registry() -> &'static ToolRegistry {
    static REGISTRY: OnceLock<ToolRegistry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let rules = |r: &[&str]| r.iter().map(|s| (*s).to_owned()).collect();
        ToolRegistry::builtin().with_policy(PermissionPolicy {
            allow: rules(&[
                "read_file",
                "list_files",
                "grep",
                "write_file(src/**)",
                "exec_command(git *)",
                "exec_command(cargo test*)",
                "edit_file(*.rs)",
            ]),
            deny: rules(&["write_file(secrets/*)", "exec_command(rm *)", "*(.env)"]),
            ask: rules(&["edit_file(*.toml)", "exec_command(git push*)"]),
        })
    })
}

fn names() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut n: Vec<String> = registry().names().into_iter().map(str::to_owned).collect();
        n.push("no_such_tool".to_owned());
        n
    })
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Some(text) = crate::text(rest) else {
        return;
    };
    let names = names();
    let name = &names[usize::from(pick) % names.len()];
    let registry = registry();
    match registry.validate(name, text) {
        Ok((_tool, value)) => {
            assert!(
                value.is_object(),
                "{name}: a valid argument value is not an object: {value}"
            );
            let _ = registry.check_permission(name, &value);
            let _ = registry.check_permission_in(name, &value, crate::scratch_dir());
            for key in ["path", "command", "pattern", "content", "old", "new"] {
                let _ = args::required_str(&value, key);
                let _ = args::opt_str(&value, key);
            }
            for key in [
                "start_line",
                "end_line",
                "max_results",
                "timeout_ms",
                "yield_time_ms",
                "max_output_tokens",
            ] {
                let _ = args::opt_u64(&value, key);
            }
            let _ = args::bool_or(&value, "recursive", false);
        }
        Err(ToolError::UnknownTool { .. }) => assert_eq!(name, "no_such_tool"),
        Err(_) => {}
    }
}
