//! Reasoning effort per model call, and reasoning blocks between the
//! provider's form and the log's (`reasoning` items).

use troupe_protocol::{ReasoningBlockRecord, ReasoningItem};

use super::AgentLoop;
use crate::provider::{ReasoningBlock, ReasoningEffort};

impl AgentLoop {
    /// The effort to send with the next call: the configured one, unless
    /// the catalog says the current model takes none (then one warning per
    /// agent, and nothing is sent). A model the catalog does not know gets
    /// the effort.
    pub(super) fn effort_for_call(&mut self) -> Option<ReasoningEffort> {
        let effort = self.config.reasoning_effort?;
        if self.catalog.supports_reasoning(&self.model) != Some(false) {
            return Some(effort);
        }
        if !self.state.effort_warned {
            self.state.effort_warned = true;
            self.warn(format!(
                "model {} takes no reasoning effort; model_reasoning_effort = \"{}\" is not sent \
                 (set [models.\"{}\"] reasoning = true if it does)",
                self.model,
                effort.as_str(),
                self.model
            ));
        }
        None
    }
}

/// The log's form of the blocks of one response.
pub(crate) fn records(blocks: &[ReasoningBlock]) -> Vec<ReasoningBlockRecord> {
    blocks
        .iter()
        .map(|b| ReasoningBlockRecord {
            text: b.text.clone(),
            signature: b.signature.clone(),
            redacted: b.redacted.clone(),
            id: b.id.clone(),
        })
        .collect()
}

/// The blocks a logged `reasoning` item carries, in the provider's form.
pub(crate) fn blocks_of(item: &ReasoningItem) -> Vec<ReasoningBlock> {
    item.blocks
        .iter()
        .map(|b| ReasoningBlock {
            text: b.text.clone(),
            signature: b.signature.clone(),
            redacted: b.redacted.clone(),
            id: b.id.clone(),
        })
        .collect()
}
