//! The loop's progress ledger (`crate::state::progress`), rewritten after
//! every turn.

use super::AgentLoop;
use crate::provider::Message;
use crate::state::progress::{ProgressLedger, Stall, tracker_completion};

/// Tool calls the confidence looks at.
const CONFIDENCE_WINDOW: usize = 10;

/// One ledger write at a time in this process. The agents of one session
/// (a batch's tasks, a pipeline's proposers) share the workspace's ledger,
/// and `write_atomic` names its temp file after the process: two saves at
/// once would share it, and the second rename would find it gone
/// (`progress.json: No such file or directory`).
static SAVING: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl AgentLoop {
    /// Rewrites `.vtcode/state/progress.json` from what the loop knows.
    pub(super) fn write_progress(&self) {
        let settings = self.context.settings();
        let Some(ws) = settings
            .workspace
            .as_deref()
            .filter(|_| settings.progress_ledger)
        else {
            return;
        };
        let threshold = settings.stall_threshold.max(1);
        let stalled_turns = self.context.stalled_turns();
        let stalled = stalled_turns >= threshold;
        let results: Vec<bool> = self
            .state
            .messages
            .iter()
            .rev()
            .filter_map(|m| match m {
                Message::ToolResult { is_error, .. } => Some(!is_error),
                _ => None,
            })
            .take(CONFIDENCE_WINDOW)
            .collect();
        let mut confidence = if results.is_empty() {
            1.0
        } else {
            results.iter().filter(|ok| **ok).count() as f64 / results.len() as f64
        };
        if stalled {
            confidence /= 2.0;
        }
        let ledger = ProgressLedger {
            goal: ProgressLedger::goal_of(self.context.task().unwrap_or_default()),
            completion: tracker_completion(ws),
            confidence,
            stall: Stall {
                stalled,
                consecutive_stalled_turns: stalled_turns,
                threshold,
            },
            turns: self.state.turns,
            agent_id: self.config.agent_id.clone(),
            updated_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        };
        let saved = {
            let _one_at_a_time = SAVING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ledger.save(ws)
        };
        if let Err(e) = saved {
            tracing::warn!(error = %e, "progress ledger not written");
        }
    }
}
