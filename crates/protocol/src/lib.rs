//! troupe-protocol: the wire types of troupe, and nothing else.
//!
//! This crate owns every type that crosses a process or file boundary:
//!
//! - [`ThreadEvent`], the one event stream (`troupe exec --json` prints it,
//!   `events.jsonl` stores it wrapped in a [`VersionedThreadEvent`]);
//! - [`ThreadItem`], the items that `item.*` events carry (VT Code's
//!   `ThreadItemDetails` names and fields);
//! - [`Usage`], token accounting;
//! - [`HandoffRequest`], the typed message an agent hands to the next one,
//!   with the boundary status of every deliverable, and its markdown form;
//! - [`Verdict`], what a read-only verifier decides about a proposal;
//! - [`ApprovalPolicy`] and the approval events
//!   ([`ApprovalRequestedEvent`], [`ApprovalResolvedEvent`]);
//! - [`AgentSpec`], what an agent is asked to do, with the enums it is
//!   made of ([`Isolation`], [`Placement`], [`ReasoningEffort`],
//!   [`SandboxMode`], [`SupervisionSpec`], [`Strategy`], [`RestartPolicy`]);
//! - the NATS messages between a coordinator and its workers
//!   ([`TaskMessage`], [`Claim`], [`ClaimReply`], [`Control`],
//!   [`SteerReply`], [`Alive`], [`WorkerStatus`], [`WorkerMessage`]; docs/scale-out.md);
//! - [`SessionSettings`], a session's `settings.json`.
//!
//! It holds serde types (with `schemars` derives, so the JSON Schema in
//! `docs/events.schema.json` is generated from them) and no I/O. Readers are
//! forward compatible: an event or item type they do not know deserializes
//! to an `Unknown` variant and can be skipped; a session kind they do not
//! know reads as [`SessionKind::Other`].
//!
//! # Layout
//!
//! - `event.rs`, `item.rs`, `usage.rs`, `legacy.rs`: the event stream
//!   (`legacy.rs` upgrades schema-1 lines); `context.rs`: the
//!   continuation a compaction or a context reset records;
//! - `handoff.rs`, `verdict.rs`: what agents and verifiers hand over;
//!   `approval.rs`: approval policies, decisions and their events;
//! - `spec.rs`: [`AgentSpec`] and its enums; `supervision.rs`: the
//!   supervision vocabulary; `sandbox.rs`: [`SandboxMode`];
//! - `remote.rs`: the NATS messages (subjects and I/O are troupe-remote's);
//! - `settings.rs`: `settings.json` (its file I/O is the `troupe` crate's).
//!
//! Every type that crosses a process or file boundary has a round-trip
//! test and a schema-drift test: `docs/events.schema.json` for the events,
//! `crates/protocol/schemas/*.schema.json` for the others
//! (`tests/protocol.rs`, `tests/wire.rs`); forms written by earlier
//! releases are kept as golden files under `tests/golden/` and read by
//! `tests/wire.rs`.
//!
//! ```
//! use troupe_protocol::{ThreadEvent, VersionedThreadEvent};
//! let line = r#"{"schema_version":"2","event":{"type":"turn.started"}}"#;
//! let ev: VersionedThreadEvent = serde_json::from_str(line).unwrap();
//! assert!(matches!(ev.event, ThreadEvent::TurnStarted(_)));
//! ```

mod approval;
mod context;
mod event;
mod handoff;
mod item;
mod legacy;
mod remote;
mod sandbox;
mod settings;
mod spec;
mod stall;
mod supervision;
mod usage;
mod verdict;

pub use approval::*;
pub use context::*;
pub use event::*;
pub use handoff::*;
pub use item::*;
pub use legacy::upgrade_v1;
pub use remote::*;
pub use sandbox::*;
pub use settings::*;
pub use spec::*;
pub use stall::*;
pub use supervision::*;
pub use usage::*;
pub use verdict::*;

/// The schema version written into every line of `events.jsonl`.
///
/// Bump it only for a change that an old reader would misread; adding an
/// event type, an item type or an optional field does not need a bump,
/// because readers skip what they do not know. Version 2 is VT Code's
/// `ThreadEvent` contract (user messages, handoffs and verdicts as
/// `troupe.*` events, tool statuses with an `outcome`); schema-1 lines are
/// still read ([`VersionedThreadEvent::from_line`]).
pub const SCHEMA_VERSION: &str = "2";

/// The JSON Schema of one `events.jsonl` line ([`VersionedThreadEvent`]),
/// pretty-printed with a trailing newline, exactly as checked in at
/// `docs/events.schema.json`.
pub fn events_json_schema() -> String {
    let schema = schemars::schema_for!(VersionedThreadEvent);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}
