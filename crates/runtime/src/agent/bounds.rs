//! Bounds on one step's tool calls, applied before anything is recorded
//! or sent again: a model that asks for 10,000 calls, or sends a 50 MB
//! argument, must not grow the log, the memory or the next request
//! without bound.
//!
//! - Past `max_calls_per_step`, calls do not run. The first of them stays
//!   in the history, answered with [`ToolError::TooManyCalls`] (how many
//!   were asked, how many ran, how many more were dropped); the rest are
//!   dropped from the history and the journal, so the next request holds
//!   at most `max_calls_per_step + 1` calls.
//! - A call whose arguments are over `max_argument_bytes` does not run:
//!   it is answered with [`ToolError::ArgumentsTooLarge`], and its
//!   arguments are replaced, in the history and the journal, by a short
//!   JSON object saying what was omitted.

use crate::provider::ToolCall;
use crate::tools::{ToolError, ToolLimits};

/// The calls of a step within the limits, each with the refusal it gets
/// instead of running, if any.
#[derive(Debug)]
pub(super) struct Bounded {
    /// The calls kept, in order.
    pub calls: Vec<ToolCall>,
    /// One entry per kept call: why it does not run.
    pub refused: Vec<Option<ToolError>>,
    /// Calls asked for in the step (kept or not).
    pub asked: usize,
}

impl Bounded {
    /// Whether calls were dropped past the cap.
    pub fn over_cap(&self, limits: ToolLimits) -> bool {
        self.asked > limits.max_calls_per_step
    }
}

/// Applies `limits` to a step's `calls`.
pub(super) fn bound_calls(mut calls: Vec<ToolCall>, limits: ToolLimits) -> Bounded {
    let asked = calls.len();
    let max = limits.max_calls_per_step;
    calls.truncate(max.saturating_add(1));
    let mut refused: Vec<Option<ToolError>> = calls
        .iter_mut()
        .map(|call| {
            let bytes = call.arguments.len();
            (bytes > limits.max_argument_bytes).then(|| {
                call.arguments = serde_json::json!({
                    "omitted": format!("{bytes} bytes of arguments, over [tools] max_argument_bytes")
                })
                .to_string();
                ToolError::ArgumentsTooLarge {
                    bytes,
                    max: limits.max_argument_bytes,
                }
            })
        })
        .collect();
    if asked > max
        && let Some(last) = refused.last_mut()
    {
        *last = Some(ToolError::TooManyCalls {
            asked,
            max,
            dropped: asked - max - 1,
        });
    }
    Bounded {
        calls,
        refused,
        asked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(i: usize, args: String) -> ToolCall {
        ToolCall {
            id: format!("c{i}"),
            name: "read_file".into(),
            arguments: args,
            signature: None,
        }
    }

    #[test]
    fn calls_past_the_cap_are_dropped_but_one_answered() {
        let limits = ToolLimits {
            max_calls_per_step: 3,
            max_argument_bytes: 10,
        };
        let calls = (0..10).map(|i| call(i, "{}".into())).collect();
        let b = bound_calls(calls, limits);
        assert_eq!(b.calls.len(), 4);
        assert!(b.refused[..3].iter().all(Option::is_none));
        let Some(ToolError::TooManyCalls {
            asked: 10,
            max: 3,
            dropped: 6,
        }) = &b.refused[3]
        else {
            panic!("{:?}", b.refused[3]);
        };
        assert!(b.over_cap(limits));
    }

    #[test]
    fn oversized_arguments_are_refused_and_not_kept() {
        let limits = ToolLimits {
            max_calls_per_step: 3,
            max_argument_bytes: 10,
        };
        let calls = vec![call(0, "{}".into()), call(1, "x".repeat(11))];
        let b = bound_calls(calls, limits);
        assert!(b.refused[0].is_none());
        assert!(matches!(
            b.refused[1],
            Some(ToolError::ArgumentsTooLarge { bytes: 11, max: 10 })
        ));
        assert!(!b.calls[1].arguments.contains("xxx"));
        assert!(b.calls[1].arguments.contains("11 bytes"));
        assert!(!b.over_cap(limits));
    }
}
