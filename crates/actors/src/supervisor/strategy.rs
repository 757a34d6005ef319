//! Restart decisions: restart types, strategies, per-supervisor intensity,
//! per-child backoff, escalation.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{ActorProcessingErr, ActorRef};
use troupe_protocol::{AgentRestartedEvent, AgentRole, ThreadEvent};

use super::{
    Child, RestartPolicy, Strategy, SupervisorConfig, SupervisorMsg, SupervisorState, stop_cell,
};

/// Whether a child that ended is restarted, by its restart type.
fn wants_restart(policy: RestartPolicy, failed: bool) -> bool {
    match policy {
        RestartPolicy::Permanent => true,
        RestartPolicy::Transient => failed,
        RestartPolicy::Temporary => false,
    }
}

/// The children that restart with child `index` (itself included). The
/// drain is never part of a group: it restarts alone, and a sibling's
/// failure leaves it running.
fn group(state: &SupervisorState, index: usize) -> Range<usize> {
    let alone = index..index + 1;
    if state.children[index].spec.role == AgentRole::Drain {
        return alone;
    }
    match state.config.strategy {
        Strategy::OneForOne => alone,
        Strategy::OneForAll => 0..state.children.len(),
        Strategy::RestForOne => index..state.children.len(),
    }
}

/// Drops instants older than the window.
fn prune(times: &mut VecDeque<Instant>, now: Instant, window: Duration) {
    while times
        .front()
        .is_some_and(|t| now.duration_since(*t) > window)
    {
        times.pop_front();
    }
}

/// Records a restart of `child` (its backoff and `attempt` count).
fn note_restart(child: &mut Child, now: Instant, window: Duration) {
    prune(&mut child.recent, now, window);
    child.recent.push_back(now);
}

/// The delay before the `restarts`-th restart (1-based) of a child within
/// the window: exponential, capped, with ±25 % jitter so restarted
/// siblings do not move in lockstep.
fn backoff(config: &SupervisorConfig, restarts: usize) -> Duration {
    let exponent = restarts.saturating_sub(1).min(16) as u32;
    let exp = config.backoff_base.saturating_mul(1u32 << exponent);
    exp.min(config.backoff_max)
        .mul_f64(0.75 + fastrand::f64() * 0.5)
}

/// Counts one restart against the supervisor's intensity window; `Err`
/// with the escalation reason when it would exceed it.
fn count_restart(state: &mut SupervisorState, agent_id: &str, reason: &str) -> Result<(), String> {
    let now = Instant::now();
    let intensity = state.config.intensity;
    prune(&mut state.restarts, now, intensity.within);
    let max = intensity.max_restarts;
    if state.restarts.len() >= max as usize {
        return Err(format!(
            "restart intensity exceeded for {agent_id}: more than {max} restarts in {:?} \
             (supervisor {}); last failure: {reason}",
            intensity.within, state.config.id
        ));
    }
    state.restarts.push_back(now);
    Ok(())
}

/// Child `index` ended (its cell is already cleared): restart it (and its
/// group) after a backoff, remove it, or escalate.
pub(super) async fn child_ended(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    index: usize,
    failed: bool,
    reason: String,
) -> Result<(), ActorProcessingErr> {
    let agent_id = state.agent_id(&state.children[index].spec.id);
    if state.shutting_down || !wants_restart(state.children[index].spec.restart, failed) {
        state.emit_stopped(agent_id, reason);
        if !state.shutting_down {
            state.children.remove(index);
        }
        return Ok(());
    }
    if let Err(why) = count_restart(state, &agent_id, &reason) {
        return Err(escalate(state, agent_id, why).await);
    }
    let window = state.config.intensity.within;
    let child = &mut state.children[index];
    note_restart(child, Instant::now(), window);
    child.pending = Some(reason.clone());
    let delay = backoff(&state.config, child.recent.len());
    let id = child.spec.id.clone();
    tracing::warn!(%agent_id, ?delay, %reason, "child ended; restart scheduled");
    stop_group(state, index, &agent_id, &reason).await;
    // The timer task ends after one send; if the supervisor is gone the
    // send fails harmlessly.
    myself.send_after(delay, move || SupervisorMsg::Restart { id, reason });
    Ok(())
}

/// Stops the running siblings in child `index`'s group, in reverse start
/// order, before the group restarts. They are forgotten before they stop,
/// so their termination events trigger nothing; temporary ones are
/// removed, the others wait for the group's restart.
async fn stop_group(state: &mut SupervisorState, index: usize, agent_id: &str, reason: &str) {
    let range = group(state, index);
    if range.len() <= 1 {
        return;
    }
    let why = format!("{}: {agent_id} ended: {reason}", state.config.strategy);
    let (now, window) = (Instant::now(), state.config.intensity.within);
    let timeout = state.config.shutdown_timeout;
    let mut temporary = Vec::new();
    for i in range.rev() {
        let child = &mut state.children[i];
        if i == index || child.spec.role == AgentRole::Drain {
            continue;
        }
        let Some(cell) = child.cell.take() else {
            continue;
        };
        if child.spec.restart == RestartPolicy::Temporary {
            temporary.push(child.spec.id.clone());
        } else {
            child.pending = Some(why.clone());
            note_restart(child, now, window);
        }
        let stop = child.spec.stop.clone();
        let sibling = state.agent_id(&state.children[i].spec.id);
        stop_cell(stop, cell, timeout, &sibling, "restart").await;
        state.emit_stopped(sibling, why.clone());
    }
    state.children.retain(|c| !temporary.contains(&c.spec.id));
}

/// Gives up: stops the other children (reverse start order; never the
/// drain, whose log must still take the session's last events), records
/// the reason (naming the child that tripped the intensity), calls
/// `on_escalate`, and returns the error that fails the supervisor. The
/// stops come first so their events are logged before whatever
/// `on_escalate` records as the session's end.
async fn escalate(
    state: &mut SupervisorState,
    agent_id: String,
    why: String,
) -> ActorProcessingErr {
    tracing::error!(%why, "escalating");
    state.shutting_down = true;
    state.emit_stopped(agent_id, why.clone());
    let reason = format!("supervisor {} escalated", state.config.id);
    let timeout = state.config.shutdown_timeout;
    for i in (0..state.children.len()).rev() {
        if state.children[i].spec.role == AgentRole::Drain {
            continue;
        }
        let Some(cell) = state.children[i].cell.take() else {
            continue;
        };
        let child_id = state.agent_id(&state.children[i].spec.id);
        let stop = state.children[i].spec.stop.clone();
        stop_cell(stop, cell, timeout, &child_id, &reason).await;
        state.emit_stopped(child_id, reason.clone());
    }
    // Held while `on_escalate` runs: whoever reads the escalation also
    // finds its effects (e.g. the session failed closed).
    let mut slot = state.escalation.lock();
    *slot = Some(why.clone());
    if let Some(f) = &state.on_escalate {
        f(&why);
    }
    drop(slot);
    why.into()
}

/// Handles `SupervisorMsg::Restart`: starts every child of `id`'s group
/// that waits for a restart, in start order. A failed start is another
/// failure of that child.
pub(super) async fn restart(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    id: &str,
    reason: String,
) -> Result<(), ActorProcessingErr> {
    if state.shutting_down {
        return Ok(());
    }
    let Some(index) = state.children.iter().position(|c| c.spec.id == id) else {
        return Ok(());
    };
    for i in group(state, index) {
        let child = &state.children[i];
        if child.cell.is_some() {
            continue;
        }
        let fallback = (i == index).then(|| reason.clone());
        let Some(why) = child.pending.clone().or(fallback) else {
            continue;
        };
        let start = Arc::clone(&child.spec.start);
        match start(myself.get_cell()).await {
            Ok(cell) => {
                let child = &mut state.children[i];
                child.cell = Some(cell);
                child.pending = None;
                child.total_restarts += 1;
                let attempt = u32::try_from(child.recent.len()).unwrap_or(u32::MAX);
                let agent_id = state.agent_id(&state.children[i].spec.id);
                state.emit(ThreadEvent::AgentRestarted(AgentRestartedEvent {
                    agent_id,
                    attempt,
                    reason: why,
                }));
            }
            Err(e) => {
                let why = format!("restart failed: {e}");
                return child_ended(myself, state, i, true, why).await;
            }
        }
    }
    Ok(())
}
