//! Retry policy: exponential backoff with jitter, honouring `Retry-After`.

use std::time::Duration;

/// When and how long to wait before sending a failed request again.
///
/// Only errors that [`ProviderError::is_retryable`](super::ProviderError::is_retryable)
/// are retried, and only while no event was handed to the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// The delay before the first retry; it doubles with each attempt.
    pub initial_backoff: Duration,
    /// The cap on any one delay, computed or asked for. A `Retry-After`
    /// longer than this is not waited for: the error is returned at once.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// The delay before retry number `attempt` (1-based), or `None` when no
    /// retry should be made (attempts exhausted, or the server asked for a
    /// longer wait than `max_backoff`).
    ///
    /// Without `Retry-After` the delay is `initial_backoff * 2^(attempt-1)`,
    /// capped, with "equal jitter" (a random point in its upper half) so
    /// that clients that failed together do not retry together.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Option<Duration> {
        if attempt > self.max_retries {
            return None;
        }
        if let Some(asked) = retry_after {
            return (asked <= self.max_backoff).then_some(asked);
        }
        let exp = self
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        let capped = exp.min(self.max_backoff);
        let half = capped / 2;
        let jitter = half.mul_f64(fastrand::f64());
        Some(half + jitter)
    }
}

/// Parses a `Retry-After` value: delay-seconds, or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let delta = when.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(delta.to_std().unwrap_or(Duration::ZERO))
}

/// The delay a response asks for: `retry-after-ms` (OpenAI) or
/// `retry-after`.
pub(crate) fn retry_after_from_headers(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    get("retry-after").and_then(parse_retry_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let p = RetryPolicy {
            max_retries: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for attempt in 1..=10 {
            let d = p.delay(attempt, None).unwrap();
            let full =
                Duration::from_millis(100 * 2u64.pow(attempt - 1)).min(Duration::from_secs(1));
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
        }
        assert_eq!(p.delay(11, None), None);
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let p = RetryPolicy::default();
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(3))),
            Some(Duration::from_secs(3))
        );
        assert_eq!(p.delay(1, Some(Duration::from_secs(3600))), None);
        assert_eq!(RetryPolicy::none().delay(1, None), None);
    }

    #[test]
    fn retry_after_formats() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
