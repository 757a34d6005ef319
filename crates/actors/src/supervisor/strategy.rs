//! Restart decisions: restart types, strategies, per-supervisor intensity,
//! per-child backoff, escalation.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{ActorProcessingErr, ActorRef};
use troupe_protocol::{AgentRestartedEvent, AgentRole, ThreadEvent};

use super::{
    Child, Escalation, RestartPolicy, Strategy, SupervisorConfig, SupervisorMsg, SupervisorState,
    stop_cell,
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
fn count_restart(
    state: &mut SupervisorState,
    agent_id: &str,
    reason: &str,
) -> Result<(), Escalation> {
    let now = Instant::now();
    let intensity = state.config.intensity;
    prune(&mut state.restarts, now, intensity.within);
    let max = intensity.max_restarts;
    if state.restarts.len() >= max as usize {
        return Err(Escalation {
            child: agent_id.to_string(),
            supervisor: state.config.id.clone(),
            max_restarts: max,
            within: intensity.within,
            reason: reason.to_string(),
        });
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
    why: Escalation,
) -> ActorProcessingErr {
    tracing::error!(%why, "escalating");
    state.shutting_down = true;
    state.emit_stopped(agent_id, why.to_string());
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
    Box::new(why)
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use parking_lot::Mutex;
    use troupe_protocol::AgentRole;

    use super::*;
    use crate::supervisor::{ChildSpec, Intensity, StartFn};

    fn spec(id: &str, role: AgentRole, restart: RestartPolicy) -> ChildSpec {
        let start: StartFn = Arc::new(|_| unreachable!("unit tests start no actor"));
        ChildSpec {
            id: id.into(),
            role,
            restart,
            start,
            stop: None,
        }
    }

    fn child(id: &str, role: AgentRole) -> Child {
        Child {
            spec: spec(id, role, RestartPolicy::Transient),
            cell: None,
            pending: None,
            recent: VecDeque::new(),
            total_restarts: 0,
        }
    }

    /// A supervisor with a drain first and agents `a`, `b`, `c`.
    fn state(strategy: Strategy, max_restarts: u32, within: Duration) -> SupervisorState {
        SupervisorState {
            config: SupervisorConfig {
                strategy,
                intensity: Intensity {
                    max_restarts,
                    within,
                },
                ..SupervisorConfig::default()
            },
            events: None,
            escalation: Arc::new(Mutex::new(None)),
            on_escalate: None,
            children: vec![
                child("drain", AgentRole::Drain),
                child("a", AgentRole::Subagent),
                child("b", AgentRole::Subagent),
                child("c", AgentRole::Subagent),
            ],
            restarts: VecDeque::new(),
            shutting_down: false,
        }
    }

    fn ago(d: Duration) -> Instant {
        Instant::now()
            .checked_sub(d)
            .expect("the clock is past the epoch")
    }

    #[test]
    fn restart_types_decide_by_failure() {
        use RestartPolicy::*;
        assert!(wants_restart(Permanent, true));
        assert!(
            wants_restart(Permanent, false),
            "permanent: even a clean exit"
        );
        assert!(wants_restart(Transient, true));
        assert!(!wants_restart(Transient, false), "transient: failures only");
        assert!(!wants_restart(Temporary, true), "temporary: never");
        assert!(!wants_restart(Temporary, false));
    }

    #[test]
    fn strategies_select_the_group() {
        let s = state(Strategy::OneForOne, 3, Duration::from_secs(60));
        assert_eq!(group(&s, 2), 2..3, "one_for_one: the child alone");
        let s = state(Strategy::OneForAll, 3, Duration::from_secs(60));
        assert_eq!(group(&s, 2), 0..4, "one_for_all: every child");
        assert_eq!(group(&s, 3), 0..4);
        let s = state(Strategy::RestForOne, 3, Duration::from_secs(60));
        assert_eq!(group(&s, 2), 2..4, "rest_for_one: it and the later ones");
        assert_eq!(group(&s, 1), 1..4);
        assert_eq!(group(&s, 3), 3..4, "the last child restarts alone");
    }

    #[test]
    fn the_drain_always_restarts_alone() {
        for strategy in [
            Strategy::OneForOne,
            Strategy::OneForAll,
            Strategy::RestForOne,
        ] {
            let s = state(strategy, 3, Duration::from_secs(60));
            assert_eq!(group(&s, 0), 0..1, "{strategy}");
        }
    }

    #[test]
    fn prune_drops_only_instants_older_than_the_window() {
        let window = Duration::from_secs(10);
        let mut times: VecDeque<Instant> = [
            ago(Duration::from_secs(30)),
            ago(Duration::from_secs(11)),
            ago(Duration::from_secs(5)),
            Instant::now(),
        ]
        .into_iter()
        .collect();
        prune(&mut times, Instant::now(), window);
        assert_eq!(times.len(), 2);
    }

    #[test]
    fn a_childs_recent_restarts_count_within_the_window() {
        let window = Duration::from_secs(10);
        let mut c = child("a", AgentRole::Subagent);
        c.recent.push_back(ago(Duration::from_secs(20)));
        c.recent.push_back(ago(Duration::from_secs(2)));
        note_restart(&mut c, Instant::now(), window);
        assert_eq!(c.recent.len(), 2, "the old restart left the window");
    }

    #[test]
    fn backoff_doubles_per_restart_with_jitter_and_is_capped() {
        let config = SupervisorConfig {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(1_000),
            ..SupervisorConfig::default()
        };
        let within = |d: Duration, nominal: u64| {
            let ms = d.as_secs_f64() * 1_000.0;
            let n = nominal as f64;
            assert!(
                ms >= n * 0.75 - 0.001 && ms <= n * 1.25 + 0.001,
                "{ms} vs {n}"
            );
        };
        for _ in 0..50 {
            within(backoff(&config, 0), 100);
            within(backoff(&config, 1), 100);
            within(backoff(&config, 2), 200);
            within(backoff(&config, 3), 400);
            within(backoff(&config, 5), 1_000);
            within(backoff(&config, 10_000), 1_000);
        }
        let spread: std::collections::HashSet<_> =
            (0..20).map(|_| backoff(&config, 1).as_micros()).collect();
        assert!(spread.len() > 1, "jittered");
    }

    #[test]
    fn intensity_allows_max_restarts_then_escalates_naming_the_child() {
        let mut s = state(Strategy::OneForOne, 3, Duration::from_secs(60));
        for _ in 0..3 {
            count_restart(&mut s, "session/a", "boom").unwrap();
        }
        let err = count_restart(&mut s, "session/b", "bang").unwrap_err();
        assert_eq!(err.child, "session/b");
        assert_eq!(err.max_restarts, 3);
        assert_eq!(err.reason, "bang");
        let why = err.to_string();
        assert!(why.contains("session/b"), "{why}");
        assert!(why.contains("more than 3 restarts"), "{why}");
        assert!(why.contains("supervisor session"), "{why}");
        assert!(why.ends_with("last failure: bang"), "{why}");
        assert_eq!(s.restarts.len(), 3, "a refused restart is not counted");
    }

    #[test]
    fn restarts_older_than_the_window_no_longer_count() {
        let window = Duration::from_secs(10);
        let mut s = state(Strategy::OneForAll, 2, window);
        s.restarts.push_back(ago(Duration::from_secs(30)));
        s.restarts.push_back(ago(Duration::from_secs(20)));
        count_restart(&mut s, "session/a", "x").unwrap();
        count_restart(&mut s, "session/a", "x").unwrap();
        assert!(count_restart(&mut s, "session/a", "x").is_err());
    }

    #[test]
    fn zero_max_restarts_escalates_at_the_first_failure() {
        let mut s = state(Strategy::OneForOne, 0, Duration::from_secs(60));
        assert!(count_restart(&mut s, "session/a", "x").is_err());
    }

    #[tokio::test]
    async fn escalation_records_the_reason_and_calls_on_escalate() {
        let mut s = state(Strategy::OneForOne, 3, Duration::from_secs(60));
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = Arc::clone(&seen);
        s.on_escalate = Some(Arc::new(move |why: &Escalation| {
            sink.lock().push(why.reason.clone())
        }));
        let why = Escalation {
            child: "session/a".into(),
            supervisor: "session".into(),
            max_restarts: 3,
            within: Duration::from_secs(60),
            reason: "too many".into(),
        };
        let err = escalate(&mut s, "session/a".into(), why.clone()).await;
        assert_eq!(err.to_string(), why.to_string());
        assert!(s.shutting_down, "no restart after an escalation");
        assert_eq!(s.escalation.lock().as_ref(), Some(&why));
        assert_eq!(*seen.lock(), vec!["too many".to_string()]);
    }
}
