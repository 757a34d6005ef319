//! A conversation as role turns with same-role neighbours merged, for the
//! wire formats that want it (Anthropic messages, Gemini contents).

use serde_json::{Value, json};

/// Turns, each a role and its blocks (Gemini: parts).
#[derive(Default)]
pub(crate) struct Turns(Vec<(String, Vec<Value>)>);

impl Turns {
    /// Appends `blocks` as a turn of `role`, into the last turn when that
    /// one has the same role.
    pub(crate) fn push(&mut self, role: &str, blocks: Vec<Value>) {
        match self.0.last_mut() {
            Some((last_role, last_blocks)) if last_role == role => last_blocks.extend(blocks),
            _ => self.0.push((role.to_owned(), blocks)),
        }
    }

    /// The turns as JSON: `{"role": <role>, <key>: [<blocks>]}` each.
    pub(crate) fn into_json(self, key: &str) -> Vec<Value> {
        self.0
            .into_iter()
            .map(|(role, blocks)| json!({"role": role, key: blocks}))
            .collect()
    }
}
