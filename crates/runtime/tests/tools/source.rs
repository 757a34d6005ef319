//! A registry following a changing [`ToolSource`] (the MCP servers'
//! catalog): a refreshed copy has the source's current tools, a narrowed
//! one only its allowed names, and the request segment's catalog hash
//! changes with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use troupe_runtime::context::segments::catalog_hash;
use troupe_runtime::tools::{SharedTool, ToolError, ToolRegistry, ToolSource, tool_fn};

#[derive(Default)]
struct Changing {
    generation: AtomicU64,
    tools: Mutex<Vec<SharedTool>>,
}

impl ToolSource for Changing {
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
    fn tools(&self) -> Vec<SharedTool> {
        self.tools.lock().clone()
    }
}

impl Changing {
    fn set(&self, names: &[&str]) {
        *self.tools.lock() = names.iter().map(|n| named(n)).collect();
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

fn named(name: &str) -> SharedTool {
    Arc::new(tool_fn(
        name.to_string(),
        "a source tool",
        |_: NoArgs| async { Ok::<_, ToolError>("ok") },
    ))
}

#[test]
fn a_refreshed_registry_has_the_sources_current_tools() {
    let source = Arc::new(Changing::default());
    source.set(&["mcp__s__a", "mcp__s__b"]);
    let mut registry = ToolRegistry::builtin();
    registry.add_source(Arc::clone(&source) as Arc<dyn ToolSource>, None);
    assert!(registry.get("mcp__s__a").is_some() && registry.get("read_file").is_some());
    assert!(registry.refreshed().is_none(), "nothing changed");
    let before = catalog_hash(&registry.definitions());

    source.set(&["mcp__s__b", "mcp__s__c"]);
    let next = registry.refreshed().expect("the source changed");
    assert!(
        next.get("mcp__s__a").is_none(),
        "a tool the source dropped is gone"
    );
    assert!(next.get("mcp__s__c").is_some());
    assert!(next.get("read_file").is_some(), "the others stay");
    assert_ne!(catalog_hash(&next.definitions()), before);
    assert!(next.refreshed().is_none(), "the copy is current");

    let mut narrowed = ToolRegistry::new();
    narrowed.add_source(
        next.source().unwrap(),
        Some(vec!["mcp__s__c".into(), "mcp__s__d".into()]),
    );
    assert_eq!(narrowed.names(), ["mcp__s__c"]);
    source.set(&["mcp__s__d", "mcp__s__e"]);
    assert_eq!(
        narrowed.refreshed().unwrap().names(),
        ["mcp__s__d"],
        "only allowed names"
    );
}
