//! Plan mode: a read-only planning agent. Every tool that may write or
//! run a command is kept in the catalog (the model sees what the build
//! will have) but refuses its calls with a message that says why and
//! what to do instead; read-only tools run as usual.

use futures::future::BoxFuture;

use super::{Capability, SharedTool, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};

/// `registry` for a planning agent: read-only tools as they are, the
/// others refusing every call ([`ToolError::Denied`], so the self-heal
/// key is `tool:denied`). Same policy and limits.
pub fn plan_mode(registry: &ToolRegistry) -> ToolRegistry {
    let mut out = ToolRegistry::new()
        .with_policy(registry.policy().clone())
        .with_limits(registry.limits());
    for name in registry.names() {
        let Some(tool) = registry.get(name) else {
            continue;
        };
        if tool.capability() == Capability::ReadOnly {
            out.register(tool);
        } else {
            out.register(std::sync::Arc::new(Refused(tool)) as SharedTool);
        }
    }
    out
}

/// A write or exec tool in plan mode.
struct Refused(SharedTool);

impl Tool for Refused {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn description(&self) -> &str {
        self.0.description()
    }
    fn schema(&self) -> serde_json::Value {
        self.0.schema()
    }
    fn capability(&self) -> Capability {
        // It does nothing; resume may settle it like any read.
        Capability::ReadOnly
    }
    fn call<'a>(
        &'a self,
        _args: serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let name = self.0.name().to_owned();
        Box::pin(async move {
            Err(ToolError::Denied(format!(
                "plan mode is read-only: `{name}` is refused. Read and search only, then answer \
                 with the plan; the change runs once the plan is approved (`troupe exec --implement`)"
            )))
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_and_commands_are_refused_and_reads_run() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), "hi\n").unwrap();
        let tools = plan_mode(&ToolRegistry::builtin());
        let ctx = ToolContext::new(ws.path());
        for (name, args) in [
            (
                "write_file",
                serde_json::json!({"path": "b.txt", "content": "x"}),
            ),
            (
                "exec_command",
                serde_json::json!({"command": "touch c.txt"}),
            ),
        ] {
            let tool = tools.get(name).unwrap();
            let err = tool.call(args, &ctx).await.unwrap_err().to_string();
            assert!(err.contains("plan mode is read-only"), "{err}");
        }
        assert!(!ws.path().join("b.txt").exists());
        assert!(!ws.path().join("c.txt").exists());
        let read = tools.get("read_file").unwrap();
        let out = read
            .call(serde_json::json!({"path": "a.txt"}), &ctx)
            .await
            .unwrap();
        assert!(out.output.contains("hi"));
        assert_eq!(
            tools.len(),
            ToolRegistry::builtin().len(),
            "the catalog is the same"
        );
    }
}
