use std::collections::HashSet;

use troupe_runtime::state::steering::{APPLIED_WINDOW, MAX_PENDING};
use troupe_runtime::state::{LoopState, LoopStateStore, SteeringError, SteeringQueue};

use crate::uuid;

fn texts(intents: &[troupe_runtime::state::Intent]) -> Vec<&str> {
    intents.iter().map(|i| i.text.as_str()).collect()
}

#[test]
fn the_seventeenth_pending_intent_is_refused_with_a_clear_error() {
    let mut q = SteeringQueue::new();
    let mut ids = Vec::new();
    for i in 0..MAX_PENDING {
        ids.push(q.push(format!("follow-up {i}")).unwrap());
    }
    assert_eq!(q.pending_len(), 16);
    let err = q.push("one too many").unwrap_err();
    assert_eq!(err, SteeringError::Full { max: 16 });
    let msg = err.to_string();
    assert!(msg.contains("full") && msg.contains("16"), "{msg}");
    // A replay with a new id is refused too.
    assert_eq!(
        q.push_with_id(uuid(), "replay"),
        Err(SteeringError::Full { max: 16 })
    );
    assert_eq!(q.pending_len(), 16);
    // Applying one makes room.
    assert!(q.mark_applied(&ids[0]));
    q.push("now it fits").unwrap();
    assert_eq!(q.pending_len(), 16);
}

#[test]
fn ids_are_uuids_and_unique() {
    let mut q = SteeringQueue::new();
    let a = q.push("a").unwrap();
    let b = q.push("b").unwrap();
    assert_ne!(a, b);
    assert!(uuid::Uuid::parse_str(&a).is_ok());
    assert_eq!(
        q.push_with_id("../not-a-uuid", "x"),
        Err(SteeringError::InvalidId("../not-a-uuid".into()))
    );
}

#[test]
fn a_repeated_id_is_a_no_op_whether_pending_or_applied() {
    let mut q = SteeringQueue::new();
    let id = uuid();
    assert_eq!(q.push_with_id(&id, "first"), Ok(true));
    assert_eq!(q.push_with_id(&id, "second"), Ok(false));
    assert_eq!(q.pending_len(), 1);
    assert_eq!(texts(&q.take_pending()), ["first"]);

    assert!(q.mark_applied(&id));
    assert_eq!(q.pending_len(), 0);
    assert_eq!(
        q.push_with_id(&id, "third"),
        Ok(false),
        "applied id queued again"
    );
    assert_eq!(q.pending_len(), 0);
    assert!(!q.mark_applied(&id), "applying twice changed something");
    assert_eq!(q.applied_ids().count(), 1);
}

#[test]
fn a_full_queue_still_accepts_a_duplicate_as_a_no_op() {
    let mut q = SteeringQueue::new();
    let first = q.push("0").unwrap();
    for i in 1..MAX_PENDING {
        q.push(i.to_string()).unwrap();
    }
    assert_eq!(q.push_with_id(&first, "dup"), Ok(false));
}

#[test]
fn take_pending_keeps_order_and_leaves_intents_pending_until_applied() {
    let mut q = SteeringQueue::new();
    let a = q.push("a").unwrap();
    let b = q.push("b").unwrap();
    q.push("c").unwrap();
    assert_eq!(texts(&q.take_pending()), ["a", "b", "c"]);
    assert_eq!(q.pending_len(), 3, "take_pending removed intents");
    q.mark_applied(&b);
    assert_eq!(texts(&q.take_pending()), ["a", "c"]);
    assert!(q.is_applied(&b) && !q.is_pending(&b));
    assert!(q.is_pending(&a));
}

#[test]
fn the_applied_window_keeps_the_last_64_ids() {
    let mut q = SteeringQueue::new();
    let ids: Vec<String> = (0..=APPLIED_WINDOW).map(|_| uuid()).collect();
    for id in &ids[..APPLIED_WINDOW] {
        q.mark_applied(id);
    }
    assert!(q.is_applied(&ids[0]));
    assert_eq!(q.applied_ids().count(), 64);
    // The 65th evicts the oldest.
    q.mark_applied(&ids[APPLIED_WINDOW]);
    assert_eq!(q.applied_ids().count(), 64);
    assert!(!q.is_applied(&ids[0]), "oldest id not evicted");
    assert!(q.is_applied(&ids[1]) && q.is_applied(&ids[APPLIED_WINDOW]));
    assert_eq!(q.applied_ids().next(), Some(ids[1].as_str()));
    // An evicted id is accepted again; one still in the window is not.
    assert_eq!(q.push_with_id(&ids[0], "again"), Ok(true));
    assert_eq!(q.push_with_id(&ids[1], "again"), Ok(false));
    assert_eq!(texts(&q.take_pending()), ["again"]);
}

#[test]
fn recovery_replays_only_pending_ids_absent_from_window_and_history() {
    let (a, b, c, d, e) = (uuid(), uuid(), uuid(), uuid(), uuid());
    // A persisted queue where `b` is both pending and applied (a crash
    // between the two writes of an older writer), and `e` only applied.
    let json = serde_json::json!({
        "pending": [
            {"id": a, "text": "a", "created_at": "2026-01-01T00:00:00Z"},
            {"id": b, "text": "b", "created_at": "2026-01-01T00:00:01Z"},
            {"id": c, "text": "c", "created_at": "2026-01-01T00:00:02Z"},
            {"id": d, "text": "d", "created_at": "2026-01-01T00:00:03Z"}
        ],
        "applied": [b, e]
    });
    let persisted: SteeringQueue = serde_json::from_value(json).unwrap();
    // The history has `c` (applied, but not yet recorded as such) and an
    // unrelated id.
    let history: HashSet<String> = [c.clone(), uuid()].into_iter().collect();
    let replay = SteeringQueue::recover(&persisted, &history);
    assert_eq!(texts(&replay), ["a", "d"]);
    assert_eq!(replay[0].id, a);
    assert_eq!(
        replay[1].created_at.to_rfc3339(),
        "2026-01-01T00:00:03+00:00"
    );

    // In place: `c` moves to the applied window, `a` and `d` stay pending.
    let mut q = persisted.clone();
    let replay = q.reconcile(&history);
    assert_eq!(texts(&replay), ["a", "d"]);
    assert!(q.is_applied(&c) && !q.is_pending(&c));
    assert_eq!(texts(&q.take_pending()), ["a", "d"]);
    // Nothing to replay once everything is applied.
    q.mark_applied(&a);
    q.mark_applied(&d);
    assert!(SteeringQueue::recover(&q, &HashSet::new()).is_empty());
}

#[test]
fn a_persisted_queue_over_the_cap_or_with_bad_ids_is_refused() {
    let pending: Vec<_> = (0..17)
        .map(|i| serde_json::json!({"id": uuid(), "text": i.to_string(), "created_at": "2026-01-01T00:00:00Z"}))
        .collect();
    let err = serde_json::from_value::<SteeringQueue>(serde_json::json!({"pending": pending}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("17 pending"), "{err}");
    let err = serde_json::from_value::<SteeringQueue>(serde_json::json!({"applied": ["nope"]}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn a_persisted_queue_round_trips_through_the_loop_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = LoopStateStore::new(dir.path());
    let mut state = LoopState::new("steer");
    let applied: Vec<String> = (0..70).map(|_| uuid()).collect();
    for id in &applied {
        state.steering.mark_applied(id);
    }
    let a = state.steering.push("first").unwrap();
    let b = state.steering.push("second\nwith two lines").unwrap();
    state.steering.push("third").unwrap();
    state.steering.mark_applied(&b);
    state.touch();
    store.save(&state).unwrap();

    let loaded = store.load("steer").unwrap().unwrap();
    assert_eq!(loaded, state);
    assert_eq!(texts(&loaded.steering.take_pending()), ["first", "third"]);
    assert_eq!(loaded.steering.applied_ids().count(), 64);
    assert!(!loaded.steering.is_applied(&applied[5]));
    assert!(loaded.steering.is_applied(&b));
    let history: HashSet<String> = [a].into_iter().collect();
    assert_eq!(
        texts(&SteeringQueue::recover(&loaded.steering, &history)),
        ["third"]
    );
}
