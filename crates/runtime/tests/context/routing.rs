//! Routing at 75 %: with auto-upgrade on, the loop moves to the
//! largest-window model of the catalog, discarding nothing.

use troupe_protocol::CompletionSubtype;
use troupe_runtime::context::Action;
use troupe_runtime::context::ContextSettings;
use troupe_runtime::context::routing::route_target;
use troupe_runtime::context::segments::SegmentStart;
use troupe_runtime::provider::{ModelCatalog, ModelOverride};
use troupe_testkit::Reply;

use crate::common::*;

fn catalog() -> ModelCatalog {
    let w = |n: u64| ModelOverride {
        context_window: Some(n),
        ..ModelOverride::default()
    };
    ModelCatalog::empty().with_overrides([
        ("scripted-small", w(8_000)),
        ("scripted-medium", w(32_000)),
        ("scripted-large", w(64_000)),
    ])
}

async fn run(auto_upgrade: bool) -> Harness {
    let mut h = harness(
        vec![big_call("c1", 24_000), Reply::text("done")],
        Setup {
            model: "scripted-small".into(),
            catalog: catalog(),
            settings: ContextSettings {
                auto_upgrade,
                calibrate: false,
                ..ContextSettings::default()
            },
            ..Setup::default()
        },
    )
    .await;
    assert_eq!(h.agent.run().await.subtype, CompletionSubtype::Success);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_75_percent_routes_to_the_largest_window() {
    let h = run(true).await;
    let routed = h.routed();
    assert_eq!(routed.len(), 1);
    let r = &routed[0];
    assert_eq!(r.from_model, "scripted-small");
    assert_eq!(r.to_model, "scripted-large");
    assert_eq!(r.window, 8_000);
    assert_eq!(r.to_window, Some(64_000));
    assert!(
        r.projected_tokens >= 6_000 && r.projected_tokens < 7_200,
        "{r:?}"
    );
    let reqs = h.server.requests();
    assert_eq!(reqs[0].model, "scripted-small");
    assert_eq!(reqs[1].model, "scripted-large");
    // Nothing was discarded and nothing compacted.
    assert_eq!(
        reqs[1].function_call_output_text("c1").unwrap().len(),
        24_000
    );
    assert!(h.boundaries().is_empty());
    assert_eq!(h.agent.model(), "scripted-large");
    let rec = h.agent.context().records().nth(1).unwrap().clone();
    assert_eq!(rec.actions, vec![Action::Routed]);
    assert_eq!(rec.window, Some(64_000));
    assert_eq!(rec.hard, Some(57_600), "re-budgeted for the new window");
    // A model change starts a new request segment.
    assert_eq!(
        h.agent.context().segments().starts(),
        &[SegmentStart::First, SegmentStart::Model]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auto_upgrade_the_model_stays() {
    let h = run(false).await;
    assert!(h.routed().is_empty());
    assert!(
        h.server
            .requests()
            .iter()
            .all(|r| r.model == "scripted-small")
    );
}

#[test]
fn routing_stays_within_a_provider_family() {
    let c = ModelCatalog::builtin();
    assert_eq!(
        route_target(&c, "gpt-4o", 128_000).map(|(m, _)| m.starts_with("gpt-4.1")),
        Some(true)
    );
    assert_eq!(route_target(&c, "claude-sonnet-4-5", 200_000), None);
    let (m, w) = route_target(&catalog(), "scripted-small", 8_000).unwrap();
    assert_eq!((m.as_str(), w), ("scripted-large", 64_000));
}
