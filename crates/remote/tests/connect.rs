//! The connection's failures against a real nats-server, each a clear
//! error naming its fix; and the JetStream pieces troupe relies on
//! (work-queue stream, durable pull consumer, in-progress ack, ack wait
//! redelivery, KV, object store) on Debian's server.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use async_nats::jetstream::AckKind;
use futures::StreamExt;
use tokio::io::AsyncReadExt;
use troupe_remote::wire::{TASK_STREAM, TASK_SUBJECTS};
use troupe_remote::{Nats, NatsConfig, RemoteError};
use troupe_test_support::nats::NatsServer;

fn config(url: &str) -> NatsConfig {
    NatsConfig {
        url: url.into(),
        ack_wait: Some(Duration::from_secs(1)),
        ..NatsConfig::default()
    }
}

#[tokio::test]
async fn an_unreachable_server_says_how_to_start_one() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = Nats::connect(&config(&format!("nats://127.0.0.1:{port}")))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, RemoteError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains("nats-server -js"), "{e}");
}

#[tokio::test]
async fn jetstream_disabled_says_start_with_js() {
    let server = NatsServer::with_args(&[]);
    let e = Nats::connect(&config(&server.url())).await.err().unwrap();
    assert!(matches!(e, RemoteError::JetStreamDisabled { .. }), "{e}");
    assert!(e.to_string().contains("-js"), "{e}");
}

#[tokio::test]
async fn a_wrong_token_is_an_auth_error_without_the_token() {
    let server = NatsServer::with_args(&["-js", "--auth", "right-token"]);
    let url = server.url().replace("nats://", "nats://wrong-token@");
    let e = Nats::connect(&config(&url)).await.err().unwrap();
    assert!(matches!(e, RemoteError::Auth { .. }), "{e}");
    assert!(!e.to_string().contains("wrong-token"), "{e}");
    let url = server.url().replace("nats://", "nats://right-token@");
    Nats::connect(&config(&url)).await.unwrap();
}

#[tokio::test]
async fn a_task_stream_without_work_queue_retention_is_refused() {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: TASK_STREAM.into(),
        subjects: vec![TASK_SUBJECTS.into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let e = Nats::connect(&config(&server.url())).await.err().unwrap();
    assert!(matches!(e, RemoteError::StreamMisconfigured { .. }), "{e}");
    assert!(e.to_string().contains("nats stream rm TROUPE_TASKS"), "{e}");
}

/// What the worker relies on: a delivery not acked within the ack wait is
/// redelivered with a higher delivery count (the incarnation); one kept
/// alive with in-progress acks is not; an acked one is gone.
#[tokio::test]
async fn redelivery_after_the_ack_wait_and_in_progress_acks() {
    let server = NatsServer::start();
    let nats = Nats::connect(&config(&server.url())).await.unwrap();
    let consumer = nats.worker_consumer().await.unwrap();
    nats.publish("troupe.tasks.s.t1".into(), "t1".into(), Some("t1"))
        .await
        .unwrap();
    // Duplicate publishes (a retry) are dropped by the message id.
    nats.publish("troupe.tasks.s.t1".into(), "t1".into(), Some("t1"))
        .await
        .unwrap();
    let fetch = |wait: Duration| {
        let consumer = consumer.clone();
        async move {
            let mut b = consumer
                .fetch()
                .max_messages(1)
                .expires(wait)
                .messages()
                .await
                .unwrap();
            b.next().await.map(|m| m.unwrap())
        }
    };
    let first = fetch(Duration::from_secs(3)).await.unwrap();
    assert_eq!(first.info().unwrap().delivered, 1);
    // Kept alive past two ack waits: no redelivery meanwhile.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        first.ack_with(AckKind::Progress).await.unwrap();
    }
    assert!(
        fetch(Duration::from_millis(500)).await.is_none(),
        "redelivered while in progress"
    );
    // Abandoned: redelivered after the ack wait, as incarnation 2.
    let second = fetch(Duration::from_secs(3)).await.unwrap();
    assert_eq!(second.payload.as_ref(), b"t1");
    assert_eq!(second.info().unwrap().delivered, 2);
    second.double_ack().await.unwrap();
    assert!(
        fetch(Duration::from_secs(2)).await.is_none(),
        "acked, yet delivered again (or the duplicate was queued)"
    );
    let repos = nats.repos().await.unwrap();
    repos.put("a/b", &mut &b"bundle"[..]).await.unwrap();
    let mut got = Vec::new();
    repos
        .get("a/b")
        .await
        .unwrap()
        .read_to_end(&mut got)
        .await
        .unwrap();
    assert_eq!(got, b"bundle");
    // The committed-handoff marks.
    assert!(!nats.is_done("s.t").await.unwrap());
    nats.mark_done("s.t", 2).await.unwrap();
    assert!(nats.is_done("s.t").await.unwrap());
}

/// A worker and a coordinator started together on a fresh server both find
/// no streams and no bucket: whichever loses the creation race must use
/// what the other made, not fail ("subjects overlap with an existing
/// stream"), as a CI run once did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_starting_together_share_the_streams_and_the_bucket() {
    for _ in 0..20 {
        let server = NatsServer::start();
        let url = server.url();
        let starts = (0..6).map(|_| {
            let url = url.clone();
            tokio::spawn(async move { Nats::connect(&config(&url)).await })
        });
        let mut connected = Vec::new();
        for r in futures::future::join_all(starts).await {
            connected.push(r.unwrap().unwrap());
        }
        let buckets = connected
            .into_iter()
            .map(|nats| tokio::spawn(async move { nats.repos().await.map(|_| ()) }));
        for r in futures::future::join_all(buckets).await {
            r.unwrap().unwrap();
        }
    }
}
