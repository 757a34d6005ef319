//! The wire types beside the events: agent specs, the NATS messages of a
//! coordinator and its workers, session settings. Round trips, the
//! checked-in JSON Schemas (`crates/protocol/schemas/`), and the forms an
//! earlier troupe wrote (`tests/golden/`), which must still read the same.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use troupe_protocol::*;

fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn golden(name: &str) -> String {
    std::fs::read_to_string(here().join("tests/golden").join(name)).unwrap()
}

/// `value` to JSON and back is `value`, and its JSON to a value and back
/// is the same JSON.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) -> Value {
    let json = serde_json::to_value(value).unwrap();
    let back: T = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(&back, value, "{json}");
    assert_eq!(serde_json::to_value(&back).unwrap(), json);
    json
}

fn full_spec() -> AgentSpec {
    AgentSpec {
        name: "planner".into(),
        task: "plan the fix".into(),
        allowed_tools: Some(vec!["read_file".into(), "grep".into()]),
        model: Some("gpt-5".into()),
        max_turns: Some(8),
        reasoning_effort: Some(ReasoningEffort::High),
        budget_share: Some(0.5),
        isolation: Isolation::Worktree,
        sandbox: Some(SandboxMode::ReadOnly),
        approval_policy: Some(ApprovalPolicy::Untrusted),
        supervision: Some(SupervisionSpec {
            strategy: Some(Strategy::OneForAll),
            max_restarts: Some(2),
            within_secs: Some(60),
            restart: Some(RestartPolicy::Transient),
        }),
        placement: Some(Placement::Remote),
        plan_mode: true,
        handoff: Some("## Plan\n1. read the test".into()),
        protect: vec!["tests/**".into(), "test_*.py".into()],
    }
}

fn task(spec: AgentSpec) -> TaskMessage {
    TaskMessage {
        task_id: "s1_root_planner-r0".into(),
        session_id: "0190aa11-s1".into(),
        agent_id: "0190aa11-s1/root/planner".into(),
        parent_id: "0190aa11-s1/root".into(),
        depth: 1,
        spec,
        base_commit: "3f2a9c1e".into(),
        base_bundle: "0190aa11-s1/s1_root_planner-r0/base".into(),
        proposer: false,
    }
}

fn event(line: &str) -> ThreadEvent {
    serde_json::from_str(line).unwrap()
}

#[test]
fn an_agent_spec_round_trips_with_plan_mode_and_handoff() {
    let json = round_trip(&full_spec());
    assert_eq!(json["plan_mode"], true);
    assert_eq!(json["handoff"], "## Plan\n1. read the test");
    assert_eq!(json["sandbox"], "read-only");
    assert_eq!(json["supervision"]["strategy"], "one_for_all");
    assert_eq!(json["protect"], json!(["tests/**", "test_*.py"]));
    let minimal = round_trip(&AgentSpec::new("a", "t"));
    assert_eq!(minimal["plan_mode"], false);
    assert!(minimal.get("handoff").is_none(), "{minimal}");
    assert!(minimal.get("protect").is_none(), "{minimal}");
    // Absent (an earlier troupe's spec): off, none.
    let old: AgentSpec = serde_json::from_value(json!({"name": "a", "task": "t"})).unwrap();
    assert_eq!(old, AgentSpec::new("a", "t"));
}

#[test]
fn the_spec_enums_keep_their_names() {
    let names = |v: Value| serde_json::to_string(&v).unwrap();
    assert_eq!(
        names(json!([Isolation::Shared, Isolation::Worktree])),
        r#"["shared","worktree"]"#
    );
    assert_eq!(
        names(json!([Placement::Local, Placement::Remote, Placement::Any])),
        r#"["local","remote","any"]"#
    );
    assert_eq!(
        names(json!(SandboxMode::ALL)),
        r#"["read-only","workspace-write","danger-full-access"]"#
    );
    for m in SandboxMode::ALL {
        assert_eq!(json!(m), m.as_str());
        assert_eq!(m.as_str().parse::<SandboxMode>(), Ok(m));
    }
    for e in [
        ReasoningEffort::Minimal,
        ReasoningEffort::Low,
        ReasoningEffort::Medium,
        ReasoningEffort::High,
    ] {
        assert_eq!(json!(e), e.as_str());
    }
    for s in [
        Strategy::OneForOne,
        Strategy::OneForAll,
        Strategy::RestForOne,
    ] {
        assert_eq!(json!(s), s.to_string());
    }
    assert_eq!(
        names(json!([
            RestartPolicy::Permanent,
            RestartPolicy::Transient,
            RestartPolicy::Temporary
        ])),
        r#"["permanent","transient","temporary"]"#
    );
    let e = serde_json::from_value::<SupervisionSpec>(json!({"strategy": "one_for_one", "x": 1}));
    assert!(e.is_err(), "supervision overrides refuse unknown fields");
}

#[test]
fn a_task_carries_the_spec_and_still_writes_the_earlier_fields() {
    let t = task(full_spec());
    let json = round_trip(&t);
    assert_eq!(json["spec"]["plan_mode"], true);
    // An earlier worker reads plan mode and the handoff beside the spec.
    assert_eq!(json["plan_mode"], true);
    assert_eq!(json["handoff"], json["spec"]["handoff"]);
    let plain = round_trip(&task(AgentSpec::new("fixer", "fix it")));
    assert_eq!(plain["plan_mode"], false);
    assert!(plain["handoff"].is_null());
    // A subagent's task says nothing of proposers (an earlier worker
    // reads it unchanged); a pipeline proposer's says so.
    assert!(plain.get("proposer").is_none());
    let mut p = task(AgentSpec::new("fixer", "fix it"));
    p.proposer = true;
    assert_eq!(round_trip(&p)["proposer"], true);
}

#[test]
fn a_task_queued_by_an_earlier_troupe_reads_the_same() {
    // Plan mode and the handoff beside a spec that had neither.
    let t: TaskMessage = serde_json::from_str(&golden("task-message-previous.json")).unwrap();
    let mut want = full_spec();
    want.model = None;
    want.protect = Vec::new();
    want.approval_policy = None;
    want.handoff = Some("## Plan\n1. read the test\n2. fix it".into());
    assert_eq!(t.spec, want);
    assert_eq!(t.agent_id, "0190aa11-s1/root/planner");
    assert_eq!(t.depth, 1);
    assert_eq!(t.base_bundle, "0190aa11-s1/s1_root_planner-r0/base");
    assert!(!t.proposer);
    let t: TaskMessage =
        serde_json::from_str(&golden("task-message-previous-minimal.json")).unwrap();
    assert!(!t.spec.plan_mode);
    assert_eq!(t.spec.handoff, None);
    assert_eq!(t.spec.isolation, Isolation::Worktree);
    assert_eq!(t.spec.placement, None);
    // Either place sets plan mode; the spec's handoff wins.
    let mut v: Value = serde_json::from_str(&golden("task-message-previous.json")).unwrap();
    v["plan_mode"] = json!(false);
    v["spec"]["plan_mode"] = json!(true);
    v["spec"]["handoff"] = json!("the spec's");
    let t: TaskMessage = serde_json::from_value(v).unwrap();
    assert!(t.spec.plan_mode);
    assert_eq!(t.spec.handoff.as_deref(), Some("the spec's"));
}

#[test]
fn claims_controls_and_heartbeats_round_trip() {
    let claim = Claim {
        delivered: 3,
        worker: "w1".into(),
        claim_id: "c0ffee".into(),
    };
    assert_eq!(
        round_trip(&claim),
        json!({"delivered": 3, "worker": "w1", "claim_id": "c0ffee"})
    );
    let granted = ClaimReply::Granted {
        incarnation: 2,
        journal: vec![
            event(r#"{"type":"turn.started","turn":1}"#),
            event(
                r#"{"type":"troupe.user_message","id":"it_0","text":"fix it","agent_id":"s/root/f"}"#,
            ),
        ],
        checkpoint: Some("s/t/ckpt-1-3".into()),
        steering: Vec::new(),
    };
    let json = round_trip(&granted);
    assert_eq!(json["type"], "granted");
    assert_eq!(json["journal"][1]["type"], "troupe.user_message");
    assert!(json.get("steering").is_none(), "{json}");
    let steered = ClaimReply::Granted {
        incarnation: 2,
        journal: Vec::new(),
        checkpoint: None,
        steering: vec![SteerIntent {
            id: "0190aa11-0000-7000-8000-000000000001".into(),
            text: "count twice".into(),
        }],
    };
    assert_eq!(
        round_trip(&steered)["steering"],
        json!([{"id": "0190aa11-0000-7000-8000-000000000001", "text": "count twice"}])
    );
    assert_eq!(
        round_trip(&ClaimReply::Busy { current: 2 }),
        json!({"type": "busy", "current": 2})
    );
    assert_eq!(
        round_trip(&ClaimReply::Fenced {
            current: 3,
            done: true
        }),
        json!({"type": "fenced", "current": 3, "done": true})
    );
    assert_eq!(
        round_trip(&Control::Fenced { current: 2 }),
        json!({"type": "fenced", "current": 2})
    );
    assert_eq!(round_trip(&Control::Cancel), json!({"type": "cancel"}));
    assert_eq!(
        round_trip(&Control::Steer {
            agent_id: "s/root/f".into(),
            text: "also the docs".into()
        }),
        json!({"type": "steer", "agent_id": "s/root/f", "text": "also the docs"})
    );
    assert_eq!(
        round_trip(&Control::Approval {
            approval_id: "0193a3c4-1111-7222-8333-444455556666".into(),
            agent_id: "s/root/f".into(),
            decision: ApprovalDecision::Deny,
            message: Some("too risky".into()),
            by: "human".into(),
            content: None,
        }),
        json!({"type": "approval", "approval_id": "0193a3c4-1111-7222-8333-444455556666", "agent_id": "s/root/f", "decision": "deny", "message": "too risky", "by": "human"})
    );
    assert_eq!(
        round_trip(&SteerReply::Queued {
            intent_id: "i1".into()
        }),
        json!({"type": "queued", "intent_id": "i1"})
    );
    assert_eq!(round_trip(&SteerReply::Unknown), json!({"type": "unknown"}));
    assert_eq!(
        round_trip(&SteerReply::NotRunning),
        json!({"type": "not_running"})
    );
    assert_eq!(
        round_trip(&SteerReply::Refused {
            reason: "ended".into()
        }),
        json!({"type": "refused", "reason": "ended"})
    );
    assert_eq!(
        round_trip(&Alive {
            incarnation: 4,
            released: false,
        }),
        json!({"incarnation": 4})
    );
    assert_eq!(
        round_trip(&Acked {
            incarnation: 2,
            position: 17,
        }),
        json!({"incarnation": 2, "position": 17})
    );
    assert_eq!(
        round_trip(&Alive {
            incarnation: 4,
            released: true,
        }),
        json!({"incarnation": 4, "released": true})
    );
}

#[test]
fn a_journal_and_worker_messages_of_an_earlier_troupe_read_the_same() {
    let reply: ClaimReply = serde_json::from_str(&golden("claim-reply-previous.json")).unwrap();
    let ClaimReply::Granted {
        incarnation,
        journal,
        checkpoint,
        steering,
    } = reply
    else {
        panic!("{reply:?}")
    };
    assert_eq!(incarnation, 2);
    assert!(steering.is_empty());
    assert_eq!(
        checkpoint.as_deref(),
        Some("0190aa11-s1/s1_root_fixer-r0/ckpt-1-3")
    );
    // Every event keeps its place; one of a type this reader does not know
    // reads as Unknown, as a bare event does.
    assert_eq!(journal.len(), 3);
    assert!(matches!(journal[0], ThreadEvent::UserMessage(_)));
    assert!(matches!(journal[1], ThreadEvent::TurnFailed(_)));
    assert_eq!(journal[2], ThreadEvent::Unknown);

    let messages: Vec<WorkerMessage> = golden("worker-messages-previous.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(messages.len(), 5);
    assert!(messages.iter().all(|m| m.incarnation() == 1));
    match &messages[1] {
        WorkerMessage::Event {
            position, event, ..
        } => {
            assert_eq!(*position, 0);
            assert!(matches!(&**event, ThreadEvent::UserMessage(m) if m.text == "fix it"));
        }
        other => panic!("{other:?}"),
    }
    let unknown = |m: &WorkerMessage| matches!(m, WorkerMessage::Event { event, .. } if **event == ThreadEvent::Unknown);
    assert!(unknown(&messages[2]));
    assert!(matches!(
        messages[2],
        WorkerMessage::Event { position: 1, .. }
    ));
    match &messages[4] {
        WorkerMessage::Finished {
            completed,
            handoff,
            result_bundle,
            ..
        } => {
            assert_eq!(completed.num_turns, 4);
            assert_eq!(handoff.state_summary, "Fixed add().");
            assert!(result_bundle.is_some());
        }
        other => panic!("{other:?}"),
    }
    // The known ones are written back as they were read.
    for (line, m) in golden("worker-messages-previous.jsonl")
        .lines()
        .zip(&messages)
        .filter(|(_, m)| !unknown(m))
    {
        let read: Value = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_value(m).unwrap(), read, "{line}");
    }
}

#[test]
fn session_settings_round_trip_with_every_kind() {
    for kind in SessionKind::KNOWN {
        let s = SessionSettings::new(kind.clone(), "t");
        let json = round_trip(&s);
        assert_eq!(json["kind"], kind.as_str());
        assert_eq!(SessionKind::from(kind.as_str()), kind);
    }
    let known = SessionKind::KNOWN;
    let names: Vec<&str> = known.iter().map(SessionKind::as_str).collect();
    assert_eq!(names, ["exec", "pipeline", "batch", "library", "worker"]);
    let other = SessionSettings::new("review", "t");
    assert_eq!(other.kind, SessionKind::Other("review".into()));
    assert_eq!(round_trip(&other)["kind"], "review");
    assert_eq!(other.kind.to_string(), "review");
}

#[test]
fn settings_written_by_an_earlier_troupe_read_and_write_back_unchanged() {
    for (file, kind) in [
        ("settings-exec-previous.json", SessionKind::Exec),
        ("settings-pipeline-previous.json", SessionKind::Pipeline),
        (
            "settings-future-kind.json",
            SessionKind::Other("review".into()),
        ),
    ] {
        let text = golden(file);
        let s: SessionSettings = serde_json::from_str(&text).unwrap();
        assert_eq!(s.kind, kind, "{file}");
        // Byte for byte what `settings.json` held (written pretty).
        assert_eq!(
            serde_json::to_string_pretty(&s).unwrap(),
            text.trim_end(),
            "{file}"
        );
    }
    let s: SessionSettings = serde_json::from_str(&golden("settings-exec-previous.json")).unwrap();
    assert_eq!(s.sandbox, Some(SandboxMode::WorkspaceWrite));
    assert_eq!(s.reasoning_effort, Some(ReasoningEffort::High));
    assert_eq!(s.network_access, Some(false));
    assert_eq!(s.nats.as_deref(), Some("nats://10.0.0.1:4222"));
    // The earliest sessions recorded no kind: they were `troupe exec`'s.
    let s: SessionSettings = serde_json::from_str(&golden("settings-without-kind.json")).unwrap();
    assert_eq!(s.kind, SessionKind::Exec);
    assert_eq!(s.task, "an early session");
}

/// The NATS messages, one field each, for one schema with shared
/// definitions.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct RemoteMessages {
    task: TaskMessage,
    claim: Claim,
    claim_reply: ClaimReply,
    control: Control,
    steer_reply: SteerReply,
    alive: Alive,
    acked: Acked,
    worker_status: WorkerStatus,
    worker_message: WorkerMessage,
}

/// The JSON Schemas of the wire types beside the events, as checked in
/// under `crates/protocol/schemas/`.
fn schemas() -> Vec<(&'static str, schemars::Schema)> {
    vec![
        ("agent_spec.schema.json", schemars::schema_for!(AgentSpec)),
        ("remote.schema.json", schemars::schema_for!(RemoteMessages)),
        (
            "settings.schema.json",
            schemars::schema_for!(SessionSettings),
        ),
    ]
}

#[test]
fn wire_schemas_have_not_drifted() {
    let dir = here().join("schemas");
    let mut stale = Vec::new();
    for (name, schema) in schemas() {
        let mut generated = serde_json::to_string_pretty(&schema).unwrap();
        generated.push('\n');
        let path = dir.join(name);
        if std::env::var_os("TROUPE_UPDATE_SCHEMA").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        // Compared as JSON values: key order differs in a build that
        // unifies serde_json's `preserve_order` (the ACP SDK's).
        let parse = |t: &str| serde_json::from_str::<serde_json::Value>(t).ok();
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        if parse(&checked_in).is_none() || parse(&checked_in) != parse(&generated) {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "crates/protocol/schemas/{stale:?} out of date with the protocol types.\n\
         A change of a wire type's form must still read what earlier releases wrote \
         (tests/golden/). Regenerate with: TROUPE_UPDATE_SCHEMA=1 cargo nextest run \
         -p troupe-protocol wire_schemas_have_not_drifted, and review the diff."
    );
}
