//! The library's verification API honours the gates: `gates::judge` on a
//! session, a real git worktree and the scripted model server. A verifier
//! that approves everything cannot pass a change whose required check
//! fails; the same verifier passes one whose check passes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use serde_json::json;
use troupe::Session;
use troupe::actors::gates::{Gate, Proposal, Requirements, judge};
use troupe::actors::verify::VerifyCall;
use troupe::protocol::{BoundaryStatus, CheckClass, Deliverable, HandoffRequest, ThreadEvent};
use troupe::runtime::verifier::{VerifierSettings, VerifyRequest};
use troupe_test_support::git::calc_repo;
use troupe_testkit::{Reply, Script, ScriptedServer};
use troupe_worktree::Workspace;

fn handoff() -> HandoffRequest {
    HandoffRequest {
        target: "verifier".into(),
        state_summary: "fixed add".into(),
        boundary_status: vec![Deliverable {
            name: "fix add".into(),
            status: BoundaryStatus::Done,
            note: None,
        }],
        task_context: "Fix add in calc.sh so sh test.sh passes.".into(),
        ..HandoffRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn judge_refuses_a_failing_required_check_whatever_the_verifier_approves() {
    let ws = tempfile::tempdir().unwrap();
    calc_repo(ws.path(), &[]);
    let server = ScriptedServer::start(
        Script::replies(vec![
            Reply::tool_call("v", "submit_verdict", json!({"approved": true})),
            Reply::text("approved"),
        ])
        .per_conversation(),
    )
    .await
    .unwrap();
    let session = Session::builder(ws.path())
        .openai_compatible(server.openai_base_url())
        .model("scripted")
        .build()
        .await
        .unwrap();
    let repo = Workspace::open(ws.path()).unwrap();
    let needs = Requirements {
        checks: vec!["sh test.sh".into()],
        ..Requirements::default()
    };
    let mut decided = Vec::new();
    for (n, content) in [
        (
            "lazy",
            "#!/bin/sh\n# looked at it\ncase \"$1\" in\n  add) echo $(($2 + $3 + 1)) ;;\nesac\n",
        ),
        (
            "good",
            "#!/bin/sh\ncase \"$1\" in\n  add) echo $(($2 + $3)) ;;\nesac\n",
        ),
    ] {
        let wt = repo.create_worktree(n).unwrap();
        std::fs::write(wt.path().join("calc.sh"), content).unwrap();
        let head = wt.commit(n).unwrap().unwrap();
        let cancel = Default::default();
        let call = VerifyCall {
            env: session.env(),
            supervisor: session.tree().supervisor_address(),
            child_id: format!("verify-{n}"),
            name: format!("session/verify-{n}"),
            model: "scripted".into(),
            settings: VerifierSettings::default().with_config(session.config()),
            cancel: &cancel,
        };
        let request = VerifyRequest {
            proposal: handoff(),
            base: wt.base(),
            head,
            worktree: wt.path().to_path_buf(),
            required_checks: Vec::new(),
            protect: Vec::new(),
        };
        let proposal = Proposal {
            proposer: &format!("session/{n}"),
            round: None,
            request,
        };
        decided.push(judge(call, proposal, &needs).await);
    }
    let (lazy, good) = (&decided[0], &decided[1]);
    assert_eq!(lazy.gate, Gate::CheckFailed, "{lazy:?}");
    assert!(!lazy.merge_allowed());
    assert!(lazy.verdict.is_none(), "the verifier was not asked");
    assert_eq!(lazy.checks[0].class, CheckClass::PreExisting);
    assert_eq!(good.gate, Gate::Passed, "{good:?}");
    assert!(good.merge_allowed());
    assert!(good.verdict.as_ref().unwrap().approved);
    assert_eq!(good.checks[0].class, CheckClass::Passes);
    assert_eq!(server.request_count(), 2, "one verifier, two turns");
    let dir = session.dir().to_path_buf();
    session.close().await.unwrap();
    let gates: Vec<(String, bool)> = std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            match serde_json::from_value::<ThreadEvent>(v["event"].clone()).unwrap() {
                ThreadEvent::Gate(g) => Some((g.outcome_code, g.merge_allowed)),
                _ => None,
            }
        })
        .collect();
    assert_eq!(
        gates,
        vec![
            ("check_failed".to_string(), false),
            ("passed".to_string(), true)
        ]
    );
}
