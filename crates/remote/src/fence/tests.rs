//! The fencing machine's table, row by row, without NATS: the reply token
//! is the claim's name.
//!
//! Over 600 lines: one test per row of the machine's table (and the
//! write-ahead's acknowledgements and checkpoints), sharing its helpers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_protocol::{ErrorEvent, ThreadEvent};

use super::{Effect, Fence, completes, fenced_in};
use crate::error::RemoteError;
use crate::wire::{Claim, ClaimReply, WorkerMessage};

const AGENT: &str = "s1/root/fixer";
const THREAD: &str = "s1:s1/root/fixer";
const ACK_WAIT: Duration = Duration::from_secs(30);

type Effects = Vec<Effect<&'static str>>;

/// A live machine (nothing to replay) whose log holds `next` events.
fn live(next: u64) -> Fence<&'static str> {
    let mut f = Fence::new(AGENT, THREAD, "troupe.events.s1.t", next, 0);
    f.set_silence(ACK_WAIT);
    f
}

fn claim(id: &str, delivered: u64) -> Claim {
    Claim {
        delivered,
        worker: format!("w-{id}"),
        claim_id: id.into(),
    }
}

/// The grant a claim's `PublishGrant` carries.
fn published(effects: Effects) -> WorkerMessage {
    match <[_; 1]>::try_from(effects) {
        Ok([Effect::PublishGrant(g)]) => g,
        Ok(other) => panic!("not a published grant: {other:?}"),
        Err(other) => panic!("not one effect: {other:?}"),
    }
}

/// Grants `id` (delivery `delivered`) as the next incarnation, its grant
/// coming back as stream message `seq`.
fn grant(f: &mut Fence<&'static str>, id: &'static str, delivered: u64, seq: u64, now: Instant) {
    let g = published(f.on_claim(claim(id, delivered), id, now));
    let effects = f.on_message(g, seq, now).unwrap();
    assert!(
        matches!(effects.as_slice(), [Effect::Granted { to, .. }] if *to == id),
        "{effects:?}"
    );
}

fn event(incarnation: u64, position: u64) -> WorkerMessage {
    let ev = ThreadEvent::Error(ErrorEvent {
        message: format!("event {position}"),
    });
    WorkerMessage::Event {
        incarnation,
        position,
        event: Box::new(ev),
    }
}

fn completed_json(thread: &str) -> Value {
    json!({
        "type": "thread.completed",
        "thread_id": thread,
        "session_id": "s1",
        "subtype": "success",
        "outcome_code": "success",
        "total_cost_usd": null,
        "num_turns": 1,
        "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0},
    })
}

fn finished(incarnation: u64) -> WorkerMessage {
    serde_json::from_value(json!({
        "type": "finished",
        "incarnation": incarnation,
        "handoff_id": "h1",
        "completed": completed_json(THREAD),
        "handoff": {"target": "s1/root", "state_summary": "done"},
        "result_bundle": "s1/t/result-1",
    }))
    .unwrap()
}

fn reply(effects: &Effects) -> (&'static str, &ClaimReply) {
    match effects.as_slice() {
        [Effect::Reply { to, answer }] => (to, answer),
        other => panic!("not one reply: {other:?}"),
    }
}

fn written(effects: &Effects) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Write(ev) => match ev.as_ref() {
                ThreadEvent::Error(e) => Some(e.message.clone()),
                other => Some(format!("{other:?}")),
            },
            _ => None,
        })
        .collect()
}

#[test]
fn start_queues_the_task_when_there_is_nothing_to_replay() {
    let f = live(0);
    assert!(matches!(f.start().as_slice(), [Effect::QueueIfAbsent]));
    let replaying: Fence<&str> = Fence::new(AGENT, THREAD, "s", 0, 7);
    assert!(replaying.start().is_empty());
}

#[test]
fn grant_first_claim_publishes_incarnation_1_and_replies_when_it_comes_back() {
    let mut f = live(3);
    let now = Instant::now();
    let g = published(f.on_claim(claim("a", 1), "a", now));
    assert!(
        matches!(&g, WorkerMessage::Grant { incarnation: 1, claim_id, delivered: 1, worker }
            if claim_id == "a" && worker == "w-a"),
        "{g:?}"
    );
    // Not current until the grant comes through the stream.
    assert_eq!(f.current(), 0);
    let effects = f.on_message(g, 1, now).unwrap();
    assert!(
        matches!(
            effects.as_slice(),
            [Effect::Granted {
                to: "a",
                incarnation: 1,
                checkpoint: None
            }]
        ),
        "{effects:?}"
    );
    assert_eq!(f.current(), 1);
}

#[test]
fn grant_in_flight_answers_another_claim_busy() {
    let mut f = live(0);
    let now = Instant::now();
    let _ = published(f.on_claim(claim("a", 1), "a", now));
    let effects = f.on_claim(claim("b", 2), "b", now);
    assert!(matches!(
        reply(&effects),
        ("b", ClaimReply::Busy { current: 0 })
    ));
}

#[test]
fn grant_that_lost_a_race_fences_its_claimant() {
    let mut f = live(0);
    let now = Instant::now();
    grant(&mut f, "a", 1, 1, now);
    // Another proxy's grant of the same incarnation for claim b comes later
    // (b's reply waits here).
    let _ = f.on_claim(claim("b", 2), "b", now + ACK_WAIT * 2);
    let lost = WorkerMessage::Grant {
        incarnation: 1,
        claim_id: "b".into(),
        delivered: 2,
        worker: "w-b".into(),
    };
    let effects = f.on_message(lost, 3, now).unwrap();
    assert!(matches!(
        reply(&effects),
        (
            "b",
            ClaimReply::Fenced {
                current: 1,
                done: false
            }
        )
    ));
    assert_eq!(f.current(), 1);
}

#[test]
fn stale_claim_of_an_older_delivery_is_recorded_and_fenced() {
    let mut f = live(0);
    let now = Instant::now();
    grant(&mut f, "b", 2, 1, now);
    let effects = f.on_claim(claim("a", 1), "a", now);
    match effects.as_slice() {
        [
            Effect::Record(message),
            Effect::Reply {
                to: "a",
                answer:
                    ClaimReply::Fenced {
                        current: 1,
                        done: false,
                    },
            },
        ] => assert_eq!(
            message,
            "remote: fenced a claim of s1/root/fixer by worker w-a from stale delivery 1 \
             (delivery 2 holds incarnation 1)"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn redelivery_while_alive_is_busy() {
    let mut f = live(0);
    let t0 = Instant::now();
    grant(&mut f, "a", 1, 1, t0);
    // Heard within the ack wait (the grant itself, then a heartbeat).
    let effects = f.on_claim(claim("b", 2), "b", t0 + ACK_WAIT / 2);
    assert!(matches!(
        reply(&effects),
        ("b", ClaimReply::Busy { current: 1 })
    ));
    f.on_alive(1, t0 + ACK_WAIT);
    let effects = f.on_claim(claim("c", 3), "c", t0 + ACK_WAIT + ACK_WAIT / 2);
    assert!(matches!(
        reply(&effects),
        ("c", ClaimReply::Busy { current: 1 })
    ));
    // An event counts as hearing from it too.
    let _ = f.on_message(event(1, 0), 2, t0 + ACK_WAIT * 2).unwrap();
    let effects = f.on_claim(claim("d", 4), "d", t0 + ACK_WAIT * 2 + ACK_WAIT / 2);
    assert!(matches!(
        reply(&effects),
        ("d", ClaimReply::Busy { current: 1 })
    ));
}

#[test]
fn redelivery_while_replaying_is_busy() {
    let mut f: Fence<&str> = Fence::new(AGENT, THREAD, "s", 0, 5);
    f.set_silence(ACK_WAIT);
    let effects = f.on_claim(claim("a", 1), "a", Instant::now());
    assert!(matches!(
        reply(&effects),
        ("a", ClaimReply::Busy { current: 0 })
    ));
}

#[test]
fn silence_past_the_ack_wait_grants_a_newer_delivery_the_next_incarnation() {
    let mut f = live(0);
    let t0 = Instant::now();
    grant(&mut f, "a", 1, 1, t0);
    // A heartbeat of another incarnation does not count.
    f.on_alive(7, t0 + ACK_WAIT / 2);
    let g = published(f.on_claim(claim("b", 2), "b", t0 + ACK_WAIT));
    assert!(matches!(
        g,
        WorkerMessage::Grant {
            incarnation: 2,
            delivered: 2,
            ..
        }
    ));
    let effects = f.on_message(g, 2, t0 + ACK_WAIT).unwrap();
    assert!(matches!(
        effects.as_slice(),
        [Effect::Granted {
            to: "b",
            incarnation: 2,
            ..
        }]
    ));
    assert_eq!(f.current(), 2);
}

#[test]
fn silence_is_needed_only_to_contest_a_live_incarnation() {
    let mut f: Fence<&str> = Fence::new(AGENT, THREAD, "s", 0, 0);
    // A first claim contests incarnation 0 (never heard from): the ack
    // wait is read before it.
    assert!(f.needs_silence(&claim("a", 1)));
    f.set_silence(ACK_WAIT);
    assert!(!f.needs_silence(&claim("a", 1)));
    let mut replaying: Fence<&str> = Fence::new(AGENT, THREAD, "s", 0, 5);
    assert!(!replaying.needs_silence(&claim("a", 1)));
    let _ = replaying.on_claim(claim("a", 1), "a", Instant::now());
}

#[test]
fn replay_retried_claim_gets_the_same_grant_and_the_journal_anew() {
    let mut f = live(0);
    let now = Instant::now();
    grant(&mut f, "a", 1, 1, now);
    let _ = f
        .on_message(
            WorkerMessage::Checkpoint {
                incarnation: 1,
                object: "s1/t/ckpt-1-0".into(),
            },
            2,
            now,
        )
        .unwrap();
    // Its call's result comes after it: the checkpoint is the latest now.
    let _ = f.on_message(event(1, 0), 3, now).unwrap();
    // The retry (its first reply was lost) is answered the same, with the
    // latest checkpoint; the journal is read again and sets the next
    // position.
    let effects = f.on_claim(claim("a", 1), "a2", now + ACK_WAIT * 5);
    match effects.as_slice() {
        [
            Effect::Granted {
                to: "a2",
                incarnation: 1,
                checkpoint: Some(cp),
            },
        ] => assert_eq!(cp, "s1/t/ckpt-1-0"),
        other => panic!("{other:?}"),
    }
    f.journal_sent(4);
    assert!(written(&f.on_message(event(1, 3), 4, now).unwrap()).is_empty());
    assert_eq!(
        written(&f.on_message(event(1, 4), 5, now).unwrap()),
        ["event 4"]
    );
}

/// The acknowledgements among `effects`: (incarnation, position).
fn acks(effects: &Effects) -> Vec<(u64, u64)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Ack {
                incarnation,
                position,
            } => Some((*incarnation, *position)),
            _ => None,
        })
        .collect()
}

#[test]
fn write_ahead_each_event_of_the_current_incarnation_is_acknowledged_after_its_write() {
    let mut f = live(2);
    let now = Instant::now();
    grant(&mut f, "a", 1, 1, now);
    // Held already (a resumed agent's repeat): acknowledged, not written.
    let held = f.on_message(event(1, 1), 2, now).unwrap();
    assert!(written(&held).is_empty());
    assert_eq!(acks(&held), [(1, 1)]);
    // New: written, then acknowledged (the write comes first).
    let new = f.on_message(event(1, 2), 3, now).unwrap();
    assert!(
        matches!(
            new.as_slice(),
            [
                Effect::Write(_),
                Effect::Ack {
                    incarnation: 1,
                    position: 2
                }
            ]
        ),
        "{new:?}"
    );
    // A stale incarnation's event is fenced, never acknowledged.
    grant(&mut f, "b", 2, 4, now + ACK_WAIT * 2);
    let stale = f.on_message(event(1, 3), 5, now).unwrap();
    assert!(acks(&stale).is_empty(), "{stale:?}");
    assert!(written(&stale).is_empty());
}

#[test]
fn write_ahead_a_checkpoint_counts_only_with_its_calls_result() {
    let mut f = live(0);
    let now = Instant::now();
    grant(&mut f, "a", 1, 1, now);
    let checkpoint = |object: &str| WorkerMessage::Checkpoint {
        incarnation: 1,
        object: object.into(),
    };
    let granted_checkpoint = |effects: Effects| match effects.as_slice() {
        [Effect::Granted { checkpoint, .. }] => checkpoint.clone(),
        other => panic!("{other:?}"),
    };
    let _ = f.on_message(checkpoint("ckpt-1-0"), 2, now).unwrap();
    let _ = f.on_message(event(1, 0), 3, now).unwrap();
    // The next call's checkpoint, but its result never came: the worker
    // died in between.
    let _ = f.on_message(checkpoint("ckpt-1-2"), 4, now).unwrap();
    // A retried claim of incarnation 1 sees only the first.
    assert_eq!(
        granted_checkpoint(f.on_claim(claim("a", 1), "a2", now)).as_deref(),
        Some("ckpt-1-0")
    );
    // Incarnation 2 resumes from it too: the pending one went with 1.
    let later = now + ACK_WAIT * 2;
    let g = published(f.on_claim(claim("b", 2), "b", later));
    assert_eq!(
        granted_checkpoint(f.on_message(g, 5, later).unwrap()).as_deref(),
        Some("ckpt-1-0")
    );
    assert!(
        f.on_message(event(2, 1), 6, later)
            .unwrap()
            .iter()
            .any(|e| matches!(e, Effect::Write(_)))
    );
    assert_eq!(
        granted_checkpoint(f.on_claim(claim("b", 2), "b2", later)).as_deref(),
        Some("ckpt-1-0")
    );
}

#[test]
fn replay_of_the_stream_rebuilds_the_state_and_writes_only_what_the_log_lacks() {
    // The log holds the first event; the stream holds a grant, two events,
    // a stale incarnation's message and a second grant (seq 1..=5).
    // The log holds the stale message's fence record (stream message 4).
    let mut f: Fence<&str> = Fence::new(AGENT, THREAD, "s", 1, 5).with_recorded([4]);
    let now = Instant::now();
    let g1 = WorkerMessage::Grant {
        incarnation: 1,
        claim_id: "a".into(),
        delivered: 1,
        worker: "w-a".into(),
    };
    // Another proxy's grant: no one here to answer.
    assert!(f.on_message(g1, 1, now).unwrap().is_empty());
    assert!(written(&f.on_message(event(1, 0), 2, now).unwrap()).is_empty());
    assert_eq!(
        written(&f.on_message(event(1, 1), 3, now).unwrap()),
        ["event 1"]
    );
    // Stale while replaying, its record in the log: neither recorded nor
    // notified again.
    assert!(f.on_message(event(0, 9), 4, now).unwrap().is_empty());
    let g2 = WorkerMessage::Grant {
        incarnation: 2,
        claim_id: "b".into(),
        delivered: 2,
        worker: "w-b".into(),
    };
    // The last replayed message makes it live: the task is queued if the
    // queue lacks it.
    let effects = f.on_message(g2, 5, now).unwrap();
    assert!(matches!(effects.as_slice(), [Effect::QueueIfAbsent]));
    assert_eq!(f.current(), 2);
    // Incarnation 2 was not heard from live: a newer delivery takes over.
    f.set_silence(ACK_WAIT);
    let g3 = published(f.on_claim(claim("c", 3), "c", now));
    assert!(matches!(g3, WorkerMessage::Grant { incarnation: 3, .. }));
}

#[test]
fn event_past_the_next_position_is_a_gap() {
    let mut f = live(0);
    let now = Instant::now();
    grant(&mut f, "a", 1, 1, now);
    let e = f.on_message(event(1, 2), 2, now).unwrap_err();
    assert!(
        matches!(&e, RemoteError::BadMessage { why, .. } if why.contains("event 2 of s1/root/fixer came before event 0")),
        "{e}"
    );
}

#[test]
fn event_completing_the_agents_thread_unregisters_it_first() {
    let mut f = live(0);
    let now = Instant::now();
    grant(&mut f, "a", 1, 1, now);
    let done = WorkerMessage::Event {
        incarnation: 1,
        position: 0,
        event: Box::new(serde_json::from_value(completed_json(THREAD)).unwrap()),
    };
    let effects = f.on_message(done, 2, now).unwrap();
    assert!(
        matches!(
            effects.as_slice(),
            [Effect::Unregister, Effect::Write(_), Effect::Ack { .. }]
        ),
        "{effects:?}"
    );
    // A subagent's completion leaves it steerable.
    let sub = WorkerMessage::Event {
        incarnation: 1,
        position: 1,
        event: Box::new(serde_json::from_value(completed_json("s1:s1/root/fixer/sub")).unwrap()),
    };
    let effects = f.on_message(sub, 3, now).unwrap();
    assert!(
        matches!(effects.as_slice(), [Effect::Write(_), Effect::Ack { .. }]),
        "{effects:?}"
    );
}

#[test]
fn fence_notice_for_an_older_incarnations_message() {
    let mut f = live(0);
    let t0 = Instant::now();
    grant(&mut f, "a", 1, 1, t0);
    grant(&mut f, "b", 2, 2, t0 + ACK_WAIT);
    let effects = f.on_message(event(1, 0), 3, t0 + ACK_WAIT).unwrap();
    match effects.as_slice() {
        [Effect::Record(message), Effect::NotifyFenced { current: 2 }] => assert_eq!(
            message,
            "remote: fenced a message of s1/root/fixer from stale incarnation 1 (current 2), \
             stream message 3"
        ),
        other => panic!("{other:?}"),
    }
    // Never merged: the current incarnation's event 0 is still the next.
    assert_eq!(
        written(&f.on_message(event(2, 0), 4, t0 + ACK_WAIT).unwrap()),
        ["event 0"]
    );
}

#[test]
fn finished_commits_then_unregisters_then_delivers() {
    let mut f = live(0);
    let now = Instant::now();
    grant(&mut f, "a", 1, 1, now);
    let effects = f.on_message(finished(1), 2, now).unwrap();
    match effects.as_slice() {
        [
            Effect::Commit {
                incarnation: 1,
                result_bundle: Some(bundle),
            },
            Effect::Unregister,
            Effect::Deliver { handoff_id, .. },
        ] => {
            assert_eq!(bundle, "s1/t/result-1");
            assert_eq!(handoff_id, "h1");
        }
        other => panic!("{other:?}"),
    }
    assert!(f.finished());
}

#[test]
fn finished_then_late_claim_is_fenced_done() {
    let mut f = live(0);
    let now = Instant::now();
    grant(&mut f, "a", 1, 1, now);
    let _ = f.on_message(finished(1), 2, now).unwrap();
    // Its own retry as well as a newer delivery.
    for (id, delivered) in [("a", 1), ("b", 2)] {
        let effects = f.on_claim(claim(id, delivered), id, now + ACK_WAIT * 3);
        assert!(matches!(
            reply(&effects),
            (
                _,
                ClaimReply::Fenced {
                    current: 1,
                    done: true
                }
            )
        ));
    }
}

#[test]
fn finished_then_late_message_of_an_older_incarnation_is_fenced() {
    let mut f = live(0);
    let t0 = Instant::now();
    grant(&mut f, "a", 1, 1, t0);
    grant(&mut f, "b", 2, 2, t0 + ACK_WAIT);
    let _ = f.on_message(finished(2), 3, t0 + ACK_WAIT).unwrap();
    let effects = f.on_message(event(1, 5), 4, t0 + ACK_WAIT).unwrap();
    match effects.as_slice() {
        [Effect::Record(message), Effect::NotifyFenced { current: 2 }] => {
            assert!(
                message.contains("from stale incarnation 1 (current 2)"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Lingering only fences: the current incarnation's repeats and grants
    // are left alone, nothing is written.
    assert!(f.on_message(event(2, 0), 5, t0).unwrap().is_empty());
    assert!(f.on_message(finished(2), 6, t0).unwrap().is_empty());
    let grant = WorkerMessage::Grant {
        incarnation: 1,
        claim_id: "z".into(),
        delivered: 9,
        worker: "w".into(),
    };
    assert!(f.on_message(grant, 7, t0).unwrap().is_empty());
}

#[test]
fn only_the_remote_agents_own_thread_completed_ends_it() {
    let completed = |t: &str| -> ThreadEvent { serde_json::from_value(completed_json(t)).unwrap() };
    let own = "s1:s1/root/r";
    assert!(completes(own, &completed(own)));
    // One of its subagents', or the session's, leaves it running.
    assert!(!completes(own, &completed("s1:s1/root/r/sub")));
    assert!(!completes(own, &completed("s1")));
    let started = serde_json::from_value(json!({
        "type": "thread.started", "thread_id": own
    }))
    .unwrap();
    assert!(!completes(own, &started));
}

#[test]
fn a_released_incarnation_is_taken_over_at_once() {
    let mut f = live(0);
    let t0 = Instant::now();
    grant(&mut f, "a", 1, 1, t0);
    f.on_alive(1, t0 + ACK_WAIT / 4);
    // A release of another incarnation changes nothing.
    f.on_released(7);
    let effects = f.on_claim(claim("b", 2), "b", t0 + ACK_WAIT / 2);
    assert!(matches!(
        reply(&effects),
        ("b", ClaimReply::Busy { current: 1 })
    ));
    // Its worker handed it back: the next claim, well within the ack
    // wait, is granted the next incarnation.
    f.on_released(1);
    let g = published(f.on_claim(claim("c", 3), "c", t0 + ACK_WAIT / 2));
    assert!(matches!(
        g,
        WorkerMessage::Grant {
            incarnation: 2,
            delivered: 3,
            ..
        }
    ));
}

#[test]
fn a_stale_message_that_came_while_no_proxy_ran_is_recorded_by_the_replay_once() {
    // The stream: grant 1, grant 2, then incarnation 1's event (seq 3),
    // which came while the coordinator was down; the log has no record of
    // it. Then the current incarnation's event (seq 4).
    let now = Instant::now();
    let replay = |f: &mut Fence<&str>| {
        let mut records = Vec::new();
        for (seq, wm) in [
            (1, grant_message(1, "a", 1)),
            (2, grant_message(2, "b", 2)),
            (3, event(1, 0)),
            (4, event(2, 0)),
        ] {
            for e in f.on_message(wm, seq, now).unwrap() {
                match e {
                    Effect::Record(m) => records.push(m),
                    Effect::NotifyFenced { current } => assert_eq!(current, 2),
                    _ => {}
                }
            }
        }
        records
    };
    let mut f: Fence<&str> = Fence::new(AGENT, THREAD, "s", 0, 4);
    let records = replay(&mut f);
    assert_eq!(
        records,
        [
            "remote: fenced a message of s1/root/fixer from stale incarnation 1 (current 2), \
             stream message 3"
        ]
    );
    // Read back from the log by the next proxy (a resumed coordinator):
    // the replay does not record it again; another agent's record and
    // other errors do not count.
    let log = [
        records[0].as_str(),
        "remote: fenced a message of s1/root/fixer2 from stale incarnation 1 (current 2), stream message 9",
        "model error: timeout",
    ];
    let held = fenced_in(AGENT, log);
    assert_eq!(held, [3].into_iter().collect());
    let mut f: Fence<&str> = Fence::new(AGENT, THREAD, "s", 1, 4).with_recorded(held);
    assert!(replay(&mut f).is_empty());
    // Live again, the same message redelivered by the stream (a second
    // consumer) is not recorded twice either; a new one is.
    assert!(f.on_message(event(1, 1), 3, now).unwrap().is_empty());
    assert_eq!(f.on_message(event(1, 1), 5, now).unwrap().len(), 2);
}

fn grant_message(incarnation: u64, claim_id: &str, delivered: u64) -> WorkerMessage {
    WorkerMessage::Grant {
        incarnation,
        claim_id: claim_id.into(),
        delivered,
        worker: format!("w-{claim_id}"),
    }
}

/// The agent's own handoff is written only after its worktree got the last
/// checkpoint: a coordinator killed before `finished` leaves no journaled
/// handoff whose change is in no worktree. Another agent's handoff (a
/// subagent's on the worker), or one with no checkpoint, applies nothing.
#[test]
fn the_agents_handoff_is_written_after_its_last_checkpoint_is_applied() {
    let mut f = live(0);
    let now = Instant::now();
    grant(&mut f, "a", 1, 1, now);
    let handoff = |from: &str, position: u64| -> WorkerMessage {
        serde_json::from_value(json!({
            "type": "event", "incarnation": 1, "position": position,
            "event": {"type": "troupe.handoff", "id": format!("h-{from}"), "from_agent": from,
                      "handoff": {"target": "s1/root", "state_summary": "done"}},
        }))
        .unwrap()
    };
    // No checkpoint yet: nothing to apply.
    let effects = f
        .on_message(handoff("s1/root/fixer/sub", 0), 2, now)
        .unwrap();
    assert!(
        matches!(effects.as_slice(), [Effect::Write(_), Effect::Ack { .. }]),
        "{effects:?}"
    );
    let checkpoint = WorkerMessage::Checkpoint {
        incarnation: 1,
        object: "ckpt-1-1".into(),
    };
    let _ = f.on_message(checkpoint.clone(), 3, now).unwrap();
    let _ = f.on_message(event(1, 1), 4, now).unwrap();
    // A subagent's handoff: the checkpoint stays where it is.
    let effects = f
        .on_message(handoff("s1/root/fixer/sub", 2), 5, now)
        .unwrap();
    assert!(
        matches!(effects.as_slice(), [Effect::Write(_), Effect::Ack { .. }]),
        "{effects:?}"
    );
    // The agent's own: apply, then write.
    let effects = f.on_message(handoff(AGENT, 3), 6, now).unwrap();
    assert!(
        matches!(effects.as_slice(), [Effect::ApplyCheckpoint(o), Effect::Write(_), Effect::Ack { .. }] if o == "ckpt-1-1"),
        "{effects:?}"
    );
    // A result that is that checkpoint is not applied twice; another is.
    let finished_with = |result: &str| -> WorkerMessage {
        let mut m = serde_json::to_value(finished(1)).unwrap();
        m["result_bundle"] = json!(result);
        serde_json::from_value(m).unwrap()
    };
    let commit = |effects: &Effects| match effects.first() {
        Some(Effect::Commit { result_bundle, .. }) => result_bundle.clone(),
        other => panic!("{other:?}"),
    };
    let mut again = f.on_message(finished_with("ckpt-1-1"), 7, now).unwrap();
    assert_eq!(commit(&again), None, "{again:?}");
    let mut other = live(0);
    grant(&mut other, "a", 1, 1, now);
    let _ = other.on_message(checkpoint, 2, now).unwrap();
    let _ = other.on_message(event(1, 0), 3, now).unwrap();
    let _ = other.on_message(handoff(AGENT, 1), 4, now).unwrap();
    again = other
        .on_message(finished_with("s1/t/result-1"), 5, now)
        .unwrap();
    assert_eq!(commit(&again).as_deref(), Some("s1/t/result-1"));
}
