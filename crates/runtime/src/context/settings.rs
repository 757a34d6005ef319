//! [`ContextSettings`]: what the context manager is told, and the
//! thresholds it implies.

use std::path::{Path, PathBuf};

use crate::config::{Config, ContextResetMode};

/// Routing fires when the projection reaches this share of the window.
pub const ROUTING_RATIO: f64 = 0.75;
/// The default compaction threshold is this share of the effective window.
pub const COMPACTION_RATIO: f64 = 0.9;
/// The soft threshold is this share of the hard one.
pub const SOFT_RATIO: f64 = 0.9;
/// The continuity tail kept verbatim, in estimated tokens.
pub const CONTINUITY_TAIL_TOKENS: u64 = 20_000;
/// The default `context.max_context_tokens`.
pub const DEFAULT_MAX_CONTEXT_TOKENS: u64 = 160_000;

/// How one agent manages its context (from `troupe.toml`, see
/// `docs/context.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct ContextSettings {
    /// `agent.harness.auto_compaction_enabled`.
    pub auto_compaction_enabled: bool,
    /// `agent.harness.auto_compaction_threshold_tokens`: wins over the
    /// 90 % rule, still capped by the model's window.
    pub auto_compaction_threshold_tokens: Option<u64>,
    /// `context.max_context_tokens`: the session's ceiling.
    pub max_context_tokens: u64,
    /// `context.auto_upgrade` / `CONTEXT_AUTO_UPGRADE`: route to a larger
    /// window at 75 %.
    pub auto_upgrade: bool,
    /// The continuity tail's budget in estimated tokens (capped at 40 % of
    /// the hard threshold, so a compacted history lands below the soft one).
    pub continuity_tail_tokens: u64,
    /// Calibrate projections against the usage providers report.
    pub calibrate: bool,
    /// `agent.harness.context_reset_mode`.
    pub reset_mode: ContextResetMode,
    /// `agent.harness.stall_threshold` (or the older
    /// `context_reset_stall_threshold`): turns without progress before
    /// `stall_action`.
    pub stall_threshold: u32,
    /// `agent.harness.stall_action` (`reset` for `context_reset_mode =
    /// "on_stall"`).
    pub stall_action: troupe_protocol::StallAction,
    /// The workspace: `.vtcode/memory.md`, `.vtcode/state/` and
    /// `.vtcode/tasks/` are read and written under it. `None`: none are.
    pub workspace: Option<PathBuf>,
    /// Where archives and spool files go (the session's `derived/`).
    /// `None`: no archive is written.
    pub archive_dir: Option<PathBuf>,
    /// The last commits (`<hash> <subject>` lines, newest first) for the
    /// orientation context; gathered by the caller (troupe-runtime runs no
    /// git). Empty: the orientation says none were given.
    pub recent_commits: Vec<String>,
    /// A handoff (markdown) from a previous agent, for the orientation.
    pub handoff: Option<String>,
    /// Rewrite the progress ledger (`.vtcode/state/progress.json` under
    /// the workspace) after every turn. Off by default (a read-only
    /// verifier writes nothing); the actor tree turns it on for the root
    /// agent.
    pub progress_ledger: bool,
    /// The run is the build after an approved plan: the root agent, resumed
    /// from the planning thread, starts from a fresh plan execution context
    /// (`AgentLoop::fresh_plan_context`) before its build turn.
    pub fresh_plan_context: bool,
}

impl Default for ContextSettings {
    fn default() -> Self {
        Self {
            auto_compaction_enabled: true,
            auto_compaction_threshold_tokens: None,
            max_context_tokens: DEFAULT_MAX_CONTEXT_TOKENS,
            auto_upgrade: false,
            continuity_tail_tokens: CONTINUITY_TAIL_TOKENS,
            calibrate: true,
            reset_mode: ContextResetMode::Off,
            stall_threshold: 3,
            stall_action: troupe_protocol::StallAction::Nudge,
            workspace: None,
            archive_dir: None,
            recent_commits: Vec::new(),
            handoff: None,
            progress_ledger: false,
            fresh_plan_context: false,
        }
    }
}

impl ContextSettings {
    /// Settings from a loaded config, for `workspace`, archiving into
    /// `archive_dir` (the session's `derived/`).
    pub fn from_config(config: &Config, workspace: &Path, archive_dir: Option<PathBuf>) -> Self {
        let h = &config.agent.harness;
        Self {
            auto_compaction_enabled: h.auto_compaction_enabled,
            auto_compaction_threshold_tokens: h.auto_compaction_threshold_tokens,
            max_context_tokens: config.context.max_context_tokens,
            auto_upgrade: config.context.auto_upgrade,
            reset_mode: h.context_reset_mode,
            stall_threshold: h.effective_stall_threshold(),
            stall_action: h.effective_stall_action(),
            workspace: Some(workspace.to_path_buf()),
            archive_dir,
            ..Self::default()
        }
    }

    /// These settings with unset paths taken from a tool context: the
    /// workspace, and the spool directory (the session's `derived/`) for
    /// archives.
    pub fn with_paths_from(mut self, ctx: &crate::tools::ToolContext) -> Self {
        if self.workspace.is_none() {
            self.workspace = Some(ctx.workspace.clone());
        }
        if self.archive_dir.is_none() {
            self.archive_dir = ctx.spool_dir.clone();
        }
        self
    }

    /// The hard compaction threshold for a model whose window is `window`:
    /// the explicit threshold capped by the window, else 90 % of the
    /// smaller of the window and `max_context_tokens`. `None` when
    /// auto-compaction is off.
    pub fn hard_threshold(&self, window: Option<u64>) -> Option<u64> {
        if !self.auto_compaction_enabled {
            return None;
        }
        Some(self.ceiling(window))
    }

    /// The hard threshold whether or not auto-compaction is on (recovery
    /// and manual compaction size their tail from it).
    pub fn ceiling(&self, window: Option<u64>) -> u64 {
        let cap = |t: u64| window.map_or(t, |w| t.min(w));
        match self.auto_compaction_threshold_tokens {
            Some(explicit) => cap(explicit),
            None => ratio(cap(self.max_context_tokens), COMPACTION_RATIO),
        }
    }

    /// The soft threshold: 90 % of the hard one.
    pub fn soft_threshold(hard: u64) -> u64 {
        ratio(hard, SOFT_RATIO)
    }

    /// The routing threshold: 75 % of the window.
    pub fn routing_threshold(window: u64) -> u64 {
        ratio(window, ROUTING_RATIO)
    }

    /// The continuity tail's budget under a hard threshold `hard`.
    pub fn tail_budget(&self, hard: u64) -> u64 {
        self.continuity_tail_tokens.min(ratio(hard, 0.4))
    }

    /// The local summary's budget in bytes under `hard` (10 % of it, at
    /// 4 bytes a token, between 1 KB and 16 KB).
    pub fn summary_budget_bytes(hard: u64) -> usize {
        let bytes = ratio(hard, 0.1).saturating_mul(4);
        usize::try_from(bytes)
            .unwrap_or(usize::MAX)
            .clamp(1024, 16 * 1024)
    }
}

/// `n * r`, rounded down.
pub fn ratio(n: u64, r: f64) -> u64 {
    (n as f64 * r) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_follow_the_seed() {
        let s = ContextSettings::default();
        assert_eq!(s.hard_threshold(Some(128_000)), Some(115_200));
        assert_eq!(s.hard_threshold(Some(1_000_000)), Some(144_000));
        assert_eq!(s.hard_threshold(None), Some(144_000));
        let explicit = ContextSettings {
            auto_compaction_threshold_tokens: Some(300_000),
            ..ContextSettings::default()
        };
        assert_eq!(explicit.hard_threshold(Some(200_000)), Some(200_000));
        assert_eq!(ContextSettings::soft_threshold(100_000), 90_000);
        assert_eq!(ContextSettings::routing_threshold(8_000), 6_000);
        let off = ContextSettings {
            auto_compaction_enabled: false,
            ..ContextSettings::default()
        };
        assert_eq!(off.hard_threshold(Some(8_000)), None);
        assert_eq!(s.tail_budget(10_000), 4_000);
        assert_eq!(s.tail_budget(144_000), 20_000);
    }

    #[test]
    fn config_keys_map_to_settings() {
        let mut config = Config::default();
        config.agent.harness.auto_compaction_threshold_tokens = Some(50_000);
        config.agent.harness.context_reset_mode = ContextResetMode::OnStall;
        config.agent.harness.context_reset_stall_threshold = 0;
        config.context.auto_upgrade = true;
        config.context.max_context_tokens = 90_000;
        let s = ContextSettings::from_config(&config, Path::new("/ws"), Some("/ws/d".into()));
        assert_eq!(s.auto_compaction_threshold_tokens, Some(50_000));
        assert_eq!(s.reset_mode, ContextResetMode::OnStall);
        assert_eq!(s.stall_threshold, 1, "at least one stalled turn");
        assert_eq!(s.stall_action, troupe_protocol::StallAction::Reset);
        assert!(s.auto_upgrade);
        assert_eq!(s.max_context_tokens, 90_000);
        assert_eq!(s.workspace.as_deref(), Some(Path::new("/ws")));
        assert_eq!(s.archive_dir.as_deref(), Some(Path::new("/ws/d")));
        let mut stalls = Config::default();
        stalls.agent.harness.stall_threshold = Some(4);
        let s = ContextSettings::from_config(&stalls, Path::new("/ws"), None);
        assert_eq!(
            s.stall_threshold, 4,
            "stall_threshold wins over the older key"
        );
        assert_eq!(s.stall_action, troupe_protocol::StallAction::Nudge);
        // The same formula as Config::compaction_threshold_tokens.
        config.agent.harness.auto_compaction_threshold_tokens = None;
        let s = ContextSettings::from_config(&config, Path::new("/ws"), None);
        for w in [None, Some(8_000), Some(128_000), Some(1_000_000)] {
            assert_eq!(
                s.hard_threshold(w),
                config.compaction_threshold_tokens(w),
                "{w:?}"
            );
        }
    }
}
