//! [`ContextManager`]: the context state one agent loop keeps, and its two
//! hook points: [`ContextManager::before_request`] (reset, routing,
//! compaction) and [`ContextManager::recover`] (recovery compaction after
//! a context-overflow rejection).
//!
//! Over 600 lines: one state and the two hooks that change it, which
//! read best side by side.

use std::collections::VecDeque;

use troupe_protocol::{
    CompactBoundaryEvent, CompactionMode, CompactionTrigger, ContextResetEvent, ContextRoutedEvent,
    ThreadEvent,
};

use super::archive::HistoryArchive;
use super::compactor::{CompactOptions, Selection, Spool, assemble, select, task_of};
use super::estimator::{Calibration, estimate_parts};
use super::groups::in_tool_loop;
use super::orientation::{LoopSnapshot, Orientation};
use super::reset::{ResetManifest, StallTracker};
use super::routing::{route_target, window_of};
use super::segments::{SegmentStart, SegmentTracker};
use super::settings::ContextSettings;
use super::step::{Action, ContextStep, ProjectionRecord, Recovery, TurnInput};
use super::summary::{local_summary, model_summary, read_memory};
use crate::config::ContextResetMode;
use crate::hooks::HookEvent;
use crate::provider::{Message, ModelRequest};

/// How many projection records are kept.
const RECORDS_KEPT: usize = 1_024;

/// Why and how a reset happens.
struct ResetKind<'a> {
    trigger: &'a str,
    reason: &'a str,
    summary: Option<&'a str>,
    usage_percent: Option<f64>,
}

/// The context state of one agent loop.
#[derive(Debug)]
pub struct ContextManager {
    settings: ContextSettings,
    calibration: Calibration,
    segments: SegmentTracker,
    stall: StallTracker,
    /// The loop asked for a stall reset before the next request.
    reset_due: bool,
    archive: Option<HistoryArchive>,
    pending: bool,
    recovery_in_flight: bool,
    sent: Option<(String, u64)>,
    records: VecDeque<ProjectionRecord>,
    task: Option<String>,
    compactions: u32,
}

impl ContextManager {
    /// A manager with `settings`.
    pub fn new(settings: ContextSettings) -> Self {
        let archive = settings
            .archive_dir
            .clone()
            .map(|d| HistoryArchive::new(d, settings.workspace.clone()));
        Self {
            settings,
            calibration: Calibration::default(),
            segments: SegmentTracker::default(),
            stall: StallTracker::default(),
            reset_due: false,
            archive,
            pending: false,
            recovery_in_flight: false,
            sent: None,
            records: VecDeque::new(),
            task: None,
            compactions: 0,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &ContextSettings {
        &self.settings
    }

    /// The calibration so far.
    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// The request segments so far.
    pub fn segments(&self) -> &SegmentTracker {
        &self.segments
    }

    /// The last projections (at most 1,024), oldest first.
    pub fn records(&self) -> impl Iterator<Item = &ProjectionRecord> {
        self.records.iter()
    }

    /// Compactions so far (automatic and recovery).
    pub fn compactions(&self) -> u32 {
        self.compactions
    }

    /// Consecutive turns without progress so far.
    pub fn stalled_turns(&self) -> u32 {
        self.stall.consecutive()
    }

    /// The stall tracker (the calls of the last turn without progress).
    pub fn stall(&self) -> &StallTracker {
        &self.stall
    }

    /// After a nudge: count turns without progress from zero again.
    pub fn restart_stall_count(&mut self) {
        self.stall.restart_count();
    }

    /// `stall_action = "reset"`: reset before the next request.
    pub fn reset_before_next_request(&mut self) {
        self.reset_due = true;
    }

    /// The task, once the first request was prepared.
    pub fn task(&self) -> Option<&str> {
        self.task.as_deref()
    }

    /// The plan → build handoff: forgets the transient state (a recovery
    /// in flight, a pending compaction, stalled turns, request segments,
    /// the last projection) and keeps the calibration, the settings and
    /// the task (the progress ledger's goal).
    /// The next request starts a new segment.
    pub fn fresh_plan(&mut self) {
        self.recovery_in_flight = false;
        self.pending = false;
        self.stall.clear();
        self.segments = SegmentTracker::default();
        self.sent = None;
    }

    /// How full `model`'s window is with this request, in whole percent
    /// (0 when the window is unknown).
    pub fn usage_percent(
        &self,
        model: &str,
        catalog: &crate::provider::ModelCatalog,
        system: Option<&str>,
        messages: &[Message],
        tools: &[crate::provider::ToolDefinition],
    ) -> u8 {
        let Some(window) = window_of(catalog, model).filter(|w| *w > 0) else {
            return 0;
        };
        let projected = self.project(model, estimate_parts(system, messages, tools));
        (projected as f64 * 100.0 / window as f64)
            .round()
            .clamp(0.0, 100.0) as u8
    }

    /// Whether a recovery retry is in flight.
    pub fn recovering(&self) -> bool {
        self.recovery_in_flight
    }

    /// Whether a compaction waits for the next turn boundary.
    pub fn pending(&self) -> bool {
        self.pending
    }

    /// The projection of `parts` for `model`.
    fn project(&self, model: &str, raw: u64) -> u64 {
        if self.settings.calibrate {
            self.calibration.project(model, raw)
        } else {
            raw
        }
    }

    /// Runs before every model request: a stall reset, routing at 75 %,
    /// compaction at the hard threshold (or at a turn boundary once the
    /// soft one was crossed), a reset after compaction. `messages` is the
    /// loop's history and is rewritten in place.
    pub async fn before_request(
        &mut self,
        messages: &mut Vec<Message>,
        input: TurnInput<'_>,
    ) -> ContextStep {
        let mut step = ContextStep::default();
        let mut actions = Vec::new();
        if self.task.is_none() {
            self.task = task_of(messages.iter()).map(str::to_owned);
        }
        let before = self.project(
            input.model,
            estimate_parts(input.system, messages, input.tools),
        );
        let window = window_of(input.catalog, input.model);
        if std::mem::take(&mut self.reset_due) {
            let percent = window.map(|w| before as f64 * 100.0 / w as f64);
            let reason = format!("on_stall after {} stalled turns", self.stall.consecutive());
            let reset = ResetKind {
                trigger: "on_stall",
                reason: &reason,
                summary: None,
                usage_percent: percent,
            };
            self.reset(messages, &input, reset, &mut step);
            actions.push(Action::Reset);
        }
        let raw = estimate_parts(input.system, messages, input.tools);
        let (model, window) = self.route(raw, window, &input, &mut step, &mut actions);
        let input = TurnInput {
            model: &model,
            ..input
        };
        let projected = self.project(&model, raw);
        let hard = self.settings.hard_threshold(window);
        if let Some(hard) = hard {
            let percent = window.map(|w| projected as f64 * 100.0 / w as f64);
            self.thresholds(
                messages,
                &input,
                hard,
                projected,
                percent,
                &mut step,
                &mut actions,
            )
            .await;
        }
        let sent_raw = estimate_parts(input.system, messages, input.tools);
        let sent = self.project(&model, sent_raw);
        self.sent = Some((model.clone(), sent_raw));
        self.record(ProjectionRecord {
            turn: input.turns,
            model,
            window,
            hard,
            before,
            sent,
            actions,
        });
        step
    }

    /// Routing at 75 %: the model to call and its window.
    fn route(
        &self,
        raw: u64,
        window: Option<u64>,
        input: &TurnInput<'_>,
        step: &mut ContextStep,
        actions: &mut Vec<Action>,
    ) -> (String, Option<u64>) {
        let model = input.model.to_owned();
        let projected = self.project(&model, raw);
        let Some(w) = window.filter(|_| self.settings.auto_upgrade) else {
            return (model, window);
        };
        if projected < ContextSettings::routing_threshold(w) {
            return (model, window);
        }
        let Some((to, to_window)) = route_target(input.catalog, &model, w) else {
            return (model, window);
        };
        tracing::info!(from = %model, to = %to, projected, window = w, "routing to a larger window");
        step.events
            .push(ThreadEvent::ContextRouted(ContextRoutedEvent {
                from_model: model,
                to_model: to.clone(),
                projected_tokens: projected,
                window: w,
                to_window: Some(to_window),
            }));
        step.switch_model = Some(to.clone());
        actions.push(Action::Routed);
        (to, Some(to_window))
    }

    /// Compaction at the hard threshold, or at a turn boundary once the
    /// soft one was crossed; then an `on_compaction` reset.
    #[allow(clippy::too_many_arguments)]
    async fn thresholds(
        &mut self,
        messages: &mut Vec<Message>,
        input: &TurnInput<'_>,
        hard: u64,
        projected: u64,
        usage_percent: Option<f64>,
        step: &mut ContextStep,
        actions: &mut Vec<Action>,
    ) {
        let mid_loop = in_tool_loop(messages);
        let soft = ContextSettings::soft_threshold(hard);
        // Pending holds only while the projection stays past the soft
        // threshold (routing to a larger window or a reset clears it).
        let due = projected >= hard || projected >= soft && !mid_loop;
        if !due {
            self.pending = projected >= soft;
            if self.pending {
                actions.push(Action::Pending);
            }
            return;
        }
        // Boxed: a compaction's future (its summary call, its hooks) would
        // more than double the context step's, which every turn boxes and
        // copies; only a compaction pays for this box.
        let compacted = Box::pin(self.compact(messages, input, hard, !mid_loop, step)).await;
        let Some(model_summary) = compacted else {
            return;
        };
        actions.push(Action::Compacted { model_summary });
        if self.settings.reset_mode == ContextResetMode::OnCompaction {
            let summary = self.last_summary(messages);
            let reset = ResetKind {
                trigger: "on_compaction",
                reason: "on_compaction after an auto-compaction",
                summary: summary.as_deref(),
                usage_percent,
            };
            self.reset(messages, input, reset, step);
            actions.push(Action::Reset);
        }
    }

    fn record(&mut self, r: ProjectionRecord) {
        if self.records.len() == RECORDS_KEPT {
            self.records.pop_front();
        }
        self.records.push_back(r);
    }

    /// The summary section of the envelope that opens `messages`.
    fn last_summary(&self, messages: &[Message]) -> Option<String> {
        match messages.first() {
            Some(Message::User { content }) => {
                super::summary::section(content, super::summary::SUMMARY_SECTION).map(str::to_owned)
            }
            _ => None,
        }
    }

    /// Call after every request is built: tracks its segment.
    pub fn observe_request(&mut self, request: &ModelRequest, provider: &str) {
        if let Some(why) = self.segments.observe(request, provider)
            && why != SegmentStart::First
        {
            tracing::debug!(?why, "a new request segment started");
        }
    }

    /// Call after a successful model call with the input tokens the
    /// provider reported: calibrates the projection, ends a recovery.
    pub fn observe_usage(&mut self, reported_input_tokens: u64) {
        self.recovery_in_flight = false;
        if let Some((model, raw)) = &self.sent {
            self.calibration.observe(model, *raw, reported_input_tokens);
        }
    }

    /// Call after a step's tools ran: counts turns without progress.
    pub fn after_tools(&mut self, messages: &[Message]) {
        if self.stall.record(messages) {
            tracing::debug!(consecutive = self.stall.consecutive(), "stalled turn");
        }
    }

    /// The provider rejected the request as too long, or failed
    /// transiently (`transient`: after its client's own retries). Right
    /// after tool output (successful tool output for a transient failure),
    /// compacts only the older prefix (keeping the current request, the
    /// tool results and the memory envelope) and asks for one retry; a
    /// second failure blocks. Works whether or not auto-compaction is on.
    pub async fn recover(
        &mut self,
        messages: &mut Vec<Message>,
        input: TurnInput<'_>,
        transient: bool,
    ) -> Recovery {
        if self.recovery_in_flight {
            self.recovery_in_flight = false;
            return Recovery::Blocked(
                "the provider failed again after a recovery compaction".into(),
            );
        }
        let applies = if transient {
            super::groups::after_tool_success(messages)
        } else {
            in_tool_loop(messages)
        };
        if !applies {
            return Recovery::NotApplicable;
        }
        let hard = self.settings.ceiling(window_of(input.catalog, input.model));
        let max_message = (self.settings.tail_budget(hard) / 2).max(512);
        let sel = select(messages, 0, max_message);
        if !sel.reduces() && transient {
            // Nothing older to fold: the failure is the provider's, not
            // the context's; the ordinary failure path decides.
            return Recovery::NotApplicable;
        }
        if !sel.reduces() {
            return Recovery::Blocked(
                "the context cannot be reduced: nothing precedes the current request".into(),
            );
        }
        let mut step = ContextStep::default();
        let opts = CompactOptions {
            tail_budget: 0,
            max_message_tokens: max_message,
            summary_budget: ContextSettings::summary_budget_bytes(hard),
        };
        self.apply(messages, &input, sel, opts, None, &mut step)
            .await;
        self.recovery_in_flight = true;
        Recovery::Retry(step)
    }

    /// Compacts at `hard`; a model writes the summary when `use_model`
    /// (never mid tool loop), with the local summary as fallback. Returns
    /// whether a model summary was used, or `None` when nothing could be
    /// folded away.
    async fn compact(
        &mut self,
        messages: &mut Vec<Message>,
        input: &TurnInput<'_>,
        hard: u64,
        use_model: bool,
        step: &mut ContextStep,
    ) -> Option<bool> {
        let opts = CompactOptions::for_tail(
            self.settings.tail_budget(hard),
            ContextSettings::summary_budget_bytes(hard),
        );
        let sel = select(messages, opts.tail_budget, opts.max_message_tokens);
        if !sel.reduces() {
            self.pending = false;
            tracing::warn!("compaction threshold reached but nothing can be folded away");
            return None;
        }
        let older: Vec<Message> = sel.older.iter().map(|&i| messages[i].clone()).collect();
        let mut summary = None;
        if use_model {
            match model_summary(input, &older, hard, opts.summary_budget).await {
                Ok((text, usage)) => {
                    step.usage = usage;
                    summary = Some(text);
                }
                Err(why) => step.warnings.push(format!(
                    "the summary call failed ({why}); using the local summary"
                )),
            }
        }
        let used_model = summary.is_some();
        self.apply(messages, input, sel, opts, summary, step).await;
        Some(used_model)
    }

    /// Archives, assembles, starts the segment, runs the pre_compact hook
    /// and records the boundary event.
    async fn apply(
        &mut self,
        messages: &mut Vec<Message>,
        input: &TurnInput<'_>,
        sel: Selection,
        opts: CompactOptions,
        summary: Option<String>,
        step: &mut ContextStep,
    ) {
        let original = messages.len();
        let archived = self.archive_history(messages);
        let summary = summary.unwrap_or_else(|| {
            let older: Vec<Message> = sel.older.iter().map(|&i| messages[i].clone()).collect();
            local_summary(&older, opts.summary_budget)
        });
        let memory = self.settings.workspace.as_deref().and_then(read_memory);
        let spool = match (&self.archive, &archived) {
            (Some(archive), Some((seq, _))) => Some(Spool { archive, seq: *seq }),
            _ => None,
        };
        let outcome = assemble(
            messages,
            &sel,
            summary,
            memory.as_deref(),
            archived.as_ref().map(|(_, p)| p.clone()),
            opts.max_message_tokens,
            spool.as_ref(),
        );
        *messages = outcome.messages;
        let (prev, new) = self.start_segment(messages, input, SegmentStart::Compaction);
        if let Some(hooks) = input.hooks {
            hooks
                .run(HookEvent::PreCompact {
                    trigger: "auto".into(),
                    mode: "local".into(),
                    original_message_count: original as u64,
                    compacted_message_count: messages.len() as u64,
                    history_artifact_path: outcome.archive_path.clone(),
                })
                .await;
            // The seed keeps session_start with source `compact` for
            // compatibility: the compacted history is a new start.
            hooks
                .run(HookEvent::SessionStart {
                    source: "compact".into(),
                })
                .await;
        }
        step.events
            .push(ThreadEvent::CompactBoundary(CompactBoundaryEvent {
                thread_id: input.thread_id.to_owned(),
                trigger: CompactionTrigger::Auto,
                mode: CompactionMode::Local,
                original_message_count: original as u64,
                compacted_message_count: messages.len() as u64,
                history_artifact_path: outcome.archive_path,
                previous_segment_id: prev.as_ref().map(|s| s.id.clone()),
                new_segment_id: Some(new.id.clone()),
                previous_prefix_hash: prev.as_ref().map(|s| s.prefix_hash.clone()),
                new_prefix_hash: Some(new.prefix_hash.clone()),
                previous_catalog_hash: prev.as_ref().map(|s| s.catalog_hash.clone()),
                new_catalog_hash: Some(new.catalog_hash),
                summary: Some(outcome.summary.trim().to_owned()),
                continuation: Some(super::continuation::record(messages)),
            }));
        self.pending = false;
        self.compactions += 1;
    }

    fn archive_history(&mut self, messages: &[Message]) -> Option<(u32, String)> {
        let archive = self.archive.as_mut()?;
        match archive.write_history(messages) {
            Ok((seq, path)) => Some((seq, archive.display(&path))),
            Err(e) => {
                tracing::warn!(error = %e, "could not archive the history");
                None
            }
        }
    }

    fn start_segment(
        &mut self,
        messages: &[Message],
        input: &TurnInput<'_>,
        why: SegmentStart,
    ) -> (Option<super::Segment>, super::Segment) {
        let request = ModelRequest {
            model: input.model.to_owned(),
            system: input.system.map(str::to_owned),
            messages: messages.to_vec(),
            tools: input.tools.to_vec(),
            max_output_tokens: None,
            temperature: None,
            seed: None,
            reasoning_effort: None,
        };
        self.segments.start(&request, input.provider, why)
    }

    /// Discards the history: archives it, writes the manifest, starts a
    /// new segment from the orientation context alone.
    fn reset(
        &mut self,
        messages: &mut Vec<Message>,
        input: &TurnInput<'_>,
        kind: ResetKind<'_>,
        step: &mut ContextStep,
    ) {
        let ResetKind {
            trigger,
            reason,
            summary,
            usage_percent,
        } = kind;
        let archived = self.archive_history(messages).map(|(_, p)| p);
        let workspace = self.settings.workspace.clone();
        let manifest = ResetManifest {
            trigger,
            stall_count: self.stall.consecutive(),
            session_id: input.session_id,
            usage_percent,
            archive: archived.as_deref(),
        };
        let manifest_path = workspace
            .as_deref()
            .and_then(|ws| match manifest.write(ws) {
                Ok(_) => Some(super::reset::MANIFEST_PATH.to_owned()),
                Err(e) => {
                    tracing::warn!(error = %e, "could not write the context reset manifest");
                    None
                }
            });
        let orientation = Orientation {
            task: self.task.as_deref(),
            reason: reason.to_owned(),
            manifest: manifest_path,
            state: LoopSnapshot::from_history(messages, input.turns, input.registry),
            workspace: workspace.as_deref(),
            commits: &self.settings.recent_commits,
            handoff: self.settings.handoff.as_deref(),
            summary,
            archive: archived.as_deref(),
        }
        .render();
        *messages = vec![Message::user(orientation)];
        self.start_segment(messages, input, SegmentStart::Reset);
        self.stall.clear();
        self.pending = false;
        step.events
            .push(ThreadEvent::ContextReset(ContextResetEvent {
                thread_id: input.thread_id.to_owned(),
                turn_id: format!("turn_{}", input.turns),
                trigger: trigger.to_owned(),
                plan_preserved: false,
                previous_context_usage_percent: usage_percent
                    .map_or(0, |p| p.round().clamp(0.0, 100.0) as u8),
                tool_budget_reset: false,
                continuation: Some(super::continuation::record(messages)),
            }));
    }
}
