//! The registry: definitions order, validate() classes, read_only().

use std::sync::Arc;

use serde_json::{Value, json};
use troupe_runtime::tools::{Capability, Tool, ToolError, ToolRegistry, schema, tool_fn};

const BUILTIN: [&str; 6] = [
    "edit_file",
    "exec_command",
    "grep",
    "list_files",
    "read_file",
    "write_file",
];

#[test]
fn definitions_are_sorted_by_name_and_carry_schemas() {
    let tools = ToolRegistry::builtin();
    let defs = tools.definitions();
    let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, BUILTIN);
    assert_eq!(defs, ToolRegistry::builtin().definitions(), "deterministic");
    for def in &defs {
        assert_eq!(def.parameters["type"], "object", "{}", def.name);
        assert_eq!(
            def.parameters["additionalProperties"], false,
            "{}",
            def.name
        );
        assert!(!def.description.is_empty());
    }
}

#[test]
fn registration_order_does_not_change_the_order() {
    let mut a = ToolRegistry::new();
    a.register(Arc::new(echo("zeta")));
    a.register(Arc::new(echo("alpha")));
    let mut b = ToolRegistry::new();
    b.register(Arc::new(echo("alpha")));
    b.register(Arc::new(echo("zeta")));
    assert_eq!(a.definitions(), b.definitions());
    assert_eq!(a.names(), ["alpha", "zeta"]);
    assert!(
        a.register(Arc::new(echo("alpha"))).is_some(),
        "same name replaces"
    );
    assert_eq!(a.len(), 2);
}

#[test]
fn validate_classes() {
    let tools = ToolRegistry::builtin();
    let err = tools.validate("read_file", "{not json").err().unwrap();
    assert_eq!(err.class(), "invalid_json");
    let err = tools.validate("rm_everything", "{}").err().unwrap();
    assert!(
        matches!(err, ToolError::UnknownTool { ref name, ref available }
        if name == "rm_everything" && available == &BUILTIN.join(", ")),
        "{err:?}"
    );
    let err = tools.validate("read_file", r#"{"path": 5}"#).err().unwrap();
    assert!(
        matches!(err, ToolError::Schema(ref m) if m.contains("`path`")),
        "{err:?}"
    );
    let err = tools
        .validate("read_file", r#"{"path": "a", "bogus": 1}"#)
        .err()
        .unwrap();
    assert!(
        matches!(err, ToolError::Schema(ref m) if m.contains("`bogus`")),
        "{err:?}"
    );
    let err = tools.validate("read_file", "{}").err().unwrap();
    assert!(
        matches!(err, ToolError::Schema(ref m) if m.contains("`path`") && m.contains("missing")),
        "{err:?}"
    );
    let err = tools.validate("read_file", "[1, 2]").err().unwrap();
    assert_eq!(err.class(), "schema");
    let (tool, args) = tools
        .validate("read_file", r#"{"path": "a", "start_line": 2}"#)
        .unwrap();
    assert_eq!(tool.name(), "read_file");
    assert_eq!(args, json!({"path": "a", "start_line": 2}));
    let (_, args) = tools.validate("list_files", "").unwrap();
    assert_eq!(args, json!({}), "empty arguments count as {{}}");
}

#[test]
fn read_only_keeps_only_read_only_tools() {
    let tools = ToolRegistry::builtin();
    let ro = tools.read_only();
    assert_eq!(ro.names(), ["grep", "list_files", "read_file"]);
    for name in ro.names() {
        assert_eq!(ro.get(name).unwrap().capability(), Capability::ReadOnly);
    }
    assert_eq!(
        tools.get("write_file").unwrap().capability(),
        Capability::Write
    );
    assert_eq!(
        tools.get("edit_file").unwrap().capability(),
        Capability::Write
    );
    assert_eq!(
        tools.get("exec_command").unwrap().capability(),
        Capability::Exec
    );
    assert_eq!(
        ro.validate("write_file", "{}").err().unwrap().class(),
        "unknown_tool"
    );
}

#[test]
fn every_builtin_schema_accepts_its_minimal_call() {
    let tools = ToolRegistry::builtin();
    let minimal = [
        (
            "edit_file",
            json!({"path": "a", "old_string": "x", "new_string": "y"}),
        ),
        ("exec_command", json!({"command": "true"})),
        ("grep", json!({"pattern": "x"})),
        ("list_files", json!({})),
        ("read_file", json!({"path": "a"})),
        ("write_file", json!({"path": "a", "content": ""})),
    ];
    for (name, args) in minimal {
        let def = tools.get(name).unwrap().schema();
        assert_eq!(schema::validate(&def, &args), Ok(()), "{name}");
    }
}

/// A trivial tool for registry tests: answers with its arguments.
fn echo(name: &'static str) -> impl Tool {
    tool_fn(
        name,
        "echo",
        |args: Value| async move { Ok(args.to_string()) },
    )
}
