//! Running one incarnation's agent: a session of its own (the journal
//! replayed into its log first), the agent started under that session's
//! supervisor, steering passed on, its approval requests answered by the
//! coordinator, stopped when the coordinator says so.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use troupe_actors::SteerError;
use troupe_actors::agent::{AgentArgs, AgentShared};
use troupe_actors::placement::WriteAhead;
use troupe_actors::subagent::agent_child_spec;
use troupe_protocol::ThreadEvent;
use troupe_runtime::approvals::Approver;
use troupe_runtime::state::{BudgetNode, CostBudget};

use super::ahead::Ahead;
use super::control::{Controls, Stop};
use super::forward::{Forward, Forwarding, Positions, forward};
use super::{Ctx, SessionRequest};
use crate::error::RemoteError;
use crate::task::Owned;
use crate::wire::{SteerReply, TaskMessage};

/// The agent's end, its handoff, and the last checkpoint this
/// incarnation published (its object).
pub(super) type Finished = (
    troupe_protocol::ThreadCompletedEvent,
    troupe_protocol::HandoffRequest,
    Option<String>,
);

/// How an incarnation's agent ended.
pub(super) enum Ran {
    Done(Box<Finished>),
    Stopped(Stop),
}

/// A worker session of one delivery, opened while its claim is answered
/// and its working copy made: the session and its log's events (to the
/// forwarder).
pub(super) struct Opened {
    session: troupe::Session,
    rx: mpsc::UnboundedReceiver<super::forward::Exported>,
}

impl Opened {
    /// Opens a session for `task` at `home` (created).
    pub(super) async fn open(
        ctx: Ctx,
        task: TaskMessage,
        home: std::path::PathBuf,
    ) -> Result<Opened, RemoteError> {
        tokio::fs::create_dir_all(&home)
            .await
            .map_err(|e| RemoteError::io(format!("create {}", home.display()), e))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let opening = std::time::Instant::now();
        let session = (ctx.factory)(SessionRequest {
            home,
            session_id: task.session_id.clone(),
            exporter: Box::new(Forward { tx, seq: 0 }),
        })
        .await
        .map_err(|e| RemoteError::Session(format!("cannot open: {e}")))?;
        tracing::info!(task = %task.task_id, ms = opening.elapsed().as_millis() as u64, "session opened");
        Ok(Opened { session, rx })
    }

    /// Closes a session no agent ran in (its claim was refused).
    pub(super) async fn close(self) {
        let _ = self.session.close().await;
    }
}

/// One incarnation's run: what it runs and where.
pub(super) struct Run<'a> {
    pub(super) ctx: &'a Ctx,
    pub(super) task: &'a TaskMessage,
    pub(super) incarnation: u64,
    pub(super) repo: &'a Path,
    /// The checkpoint its worktree starts from (`None`: the base commit).
    pub(super) checkpoint: Option<&'a str>,
}

/// Runs the agent in a session of its own to its end, its events
/// forwarded (those of the journal it resumes from excepted), steering
/// passed on, stopped when the coordinator says so.
pub(super) async fn run_agent(
    run: &Run<'_>,
    opened: Opened,
    journal: &[ThreadEvent],
    controls: &mut Controls,
) -> Result<Ran, RemoteError> {
    let Run {
        ctx,
        task,
        incarnation,
        repo,
        checkpoint,
    } = *run;
    let Opened { session, rx } = opened;
    // The journal goes into this session's log first (the agent resumes
    // from it); what the log took of it is not forwarded again.
    let mut replayed = 0;
    for ev in journal {
        match session.log().sender().emit(ev) {
            Ok(_) => replayed += 1,
            Err(e) => tracing::warn!(error = %e, "a journal event was refused"),
        }
    }
    // Write-ahead: its write and exec calls wait until the coordinator
    // holds their `item.started`; resumed, its worktree went back to the
    // checkpoint, which an interrupted call's report says.
    let ahead = Arc::new(
        Ahead::new(&task.agent_id, checkpoint, !journal.is_empty()).keeping(journal, checkpoint),
    );
    let mut forwarder = Owned::spawn(forward(
        Forwarding {
            ctx: ctx.clone(),
            task: task.clone(),
            incarnation,
            positions: Positions {
                skip: replayed,
                first: journal.len() as u64,
            },
            repo: repo.to_path_buf(),
            stop: controls.stop.clone(),
            ahead: Arc::clone(&ahead),
        },
        rx,
    ));
    // The task's agents ask the coordinator's session, never this one:
    // their requests go there in the forwarded log, its decisions come
    // back on the control subject. The task's approval_policy is the one
    // its parent gave it (never looser than the parent's).
    controls.approvals.load(journal);
    let mut env = (**session.env()).clone();
    env.approver = Some(Arc::clone(&controls.approvals) as Arc<dyn Approver>);
    env.write_ahead = Some(ahead as Arc<dyn WriteAhead>);
    if let Some(policy) = task.spec.approval_policy {
        env.approval_policy = policy;
    }
    let env = Arc::new(env);
    let (done_tx, mut done_rx) = oneshot::channel();
    let spec = task.spec.clone();
    let budget = BudgetNode::root_named(task.agent_id.clone(), CostBudget::unlimited());
    let shared = AgentShared::for_agent(&env, &task.agent_id, done_tx, !journal.is_empty(), budget);
    let args = AgentArgs::child(
        env,
        task.agent_id.clone(),
        task.parent_id.clone(),
        task.depth.max(1),
        spec,
        shared,
        repo,
    )
    // The worker's own session span: traces do not cross the queue.
    .under_span(session.span().clone());
    // A pipeline proposer hands off; the coordinator verifies and merges.
    let args = if task.proposer {
        args.as_proposer()
    } else {
        args
    };
    // Steering an earlier incarnation's worker took but did not apply.
    let replayed = std::mem::take(&mut controls.replayed);
    if !replayed.is_empty() {
        let queued = args.queue_intents(replayed.into_iter().map(|i| (i.id, i.text)));
        tracing::info!(task = %task.task_id, queued, "journaled steering replayed");
    }
    session
        .tree()
        .start_child(agent_child_spec(args))
        .await
        .map_err(|e| RemoteError::Session(format!("start the agent: {e}")))?;
    let outcome = loop {
        tokio::select! {
            biased;
            o = &mut done_rx => break Ok(o),
            _ = controls.stop.changed() => {
                if let Some(stop) = *controls.stop.borrow() {
                    break Err(Halt::Stop(stop));
                }
            }
            // The forwarder ends early only when it failed: nothing the
            // agent does from here on would reach the coordinator, so it
            // is stopped now rather than left running effects no journal
            // holds; the delivery is given back.
            r = &mut forwarder => break Err(Halt::Forwarder(r)),
            Some((agent_id, text, reply)) = controls.steer.recv() => {
                let answer = match session.steer(&agent_id, &text).await {
                    Ok(intent_id) => {
                        tracing::info!(agent = %agent_id, intent = %intent_id, "steering queued");
                        SteerReply::Queued { intent_id }
                    }
                    Err(SteerError::Unknown(_) | SteerError::Ended(_)) => SteerReply::Unknown,
                    Err(SteerError::NotRunning(_)) => SteerReply::NotRunning,
                    Err(e) => SteerReply::Refused { reason: e.to_string() },
                };
                if let (Some(reply), Ok(body)) = (reply, serde_json::to_vec(&answer)) {
                    let _ = ctx.nats.client.publish(reply, body.into()).await;
                }
            }
        }
    };
    let _ = session.close().await;
    let outcome = match outcome {
        Ok(o) => o,
        Err(Halt::Stop(stop)) => {
            let _ = forwarder.await;
            return Ok(Ran::Stopped(stop));
        }
        Err(Halt::Forwarder(r)) => {
            let e = match r {
                Ok(Err(e)) => e,
                Ok(Ok(_)) => RemoteError::Task {
                    what: "event forwarder",
                    why: "ended early".into(),
                },
                Err(e) => RemoteError::Task {
                    what: "event forwarder",
                    why: format!("failed: {e}"),
                },
            };
            tracing::warn!(task = %task.task_id, error = %e, "forwarding failed; the agent is stopped");
            return Err(e);
        }
    };
    let forwarded = forwarder.await;
    let last_checkpoint = match forwarded {
        Ok(r) => r?,
        Err(e) => {
            return Err(RemoteError::Task {
                what: "event forwarder",
                why: format!("failed: {e}"),
            });
        }
    };
    let outcome =
        outcome.map_err(|_| RemoteError::Session("the agent stopped without an outcome".into()))?;
    Ok(Ran::Done(Box::new((
        outcome.completed,
        outcome.handoff,
        last_checkpoint,
    ))))
}

/// Why an incarnation's agent was stopped before it ended.
enum Halt {
    /// The coordinator said so.
    Stop(Stop),
    /// The forwarder ended (failed) while the agent ran.
    Forwarder(Result<Result<Option<String>, RemoteError>, tokio::task::JoinError>),
}
