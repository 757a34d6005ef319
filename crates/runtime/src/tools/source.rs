//! Tools that can change while a session runs: an MCP server's catalog
//! after `notifications/tools/list_changed`. A [`ToolRegistry`] with a
//! [`ToolSource`] takes the source's current tools whenever the loop asks
//! for a [`ToolRegistry::refreshed`] copy (before each model request).

use std::sync::Arc;

use super::{SharedTool, ToolRegistry};

/// A changing set of tools.
pub trait ToolSource: Send + Sync {
    /// Bumped whenever [`ToolSource::tools`] changed.
    fn generation(&self) -> u64;
    /// The tools now.
    fn tools(&self) -> Vec<SharedTool>;
}

/// A registry's link to its source.
#[derive(Clone)]
pub(super) struct SourceLink {
    source: Arc<dyn ToolSource>,
    /// The generation the registry holds.
    seen: u64,
    /// The names the registry took from the source.
    names: Vec<String>,
    /// Only these names (a subagent's `allowed_tools`); `None`: all.
    only: Option<Vec<String>>,
}

impl ToolRegistry {
    /// Registers `source`'s tools (those named in `only`, when given) and
    /// follows its changes ([`ToolRegistry::refreshed`]).
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>, only: Option<Vec<String>>) {
        let mut link = SourceLink {
            seen: source.generation(),
            source,
            names: Vec::new(),
            only,
        };
        self.take_from(&mut link);
        self.source = Some(link);
    }

    /// The source this registry follows, for a registry built from it
    /// (a subagent's, narrowed to `only`).
    pub fn source(&self) -> Option<Arc<dyn ToolSource>> {
        self.source.as_ref().map(|l| Arc::clone(&l.source))
    }

    /// A copy with the source's current tools, when they changed since
    /// this registry took them; `None` when nothing changed.
    pub fn refreshed(&self) -> Option<ToolRegistry> {
        let link = self.source.as_ref()?;
        let now = link.source.generation();
        if now == link.seen {
            return None;
        }
        let mut next = self.clone();
        let mut link = link.clone();
        link.seen = now;
        for name in std::mem::take(&mut link.names) {
            next.unregister(&name);
        }
        next.take_from(&mut link);
        next.source = Some(link);
        Some(next)
    }

    fn take_from(&mut self, link: &mut SourceLink) {
        for tool in link.source.tools() {
            let name = tool.name().to_string();
            if link.only.as_ref().is_some_and(|o| !o.contains(&name)) {
                continue;
            }
            link.names.push(name);
            self.register(tool);
        }
    }
}
