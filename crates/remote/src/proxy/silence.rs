//! A `temporary` remote child given up on silence: the clock of its
//! running incarnation's heartbeats. Silent for the heartbeat timeout (the
//! workers' ack wait) means its worker is presumed dead; a temporary
//! child is then never run again (a transient one is redelivered).

use std::time::{Duration, Instant};

/// The silence clock of one task's running incarnation.
pub(super) struct Silence {
    /// How long it may stay silent.
    limit: Duration,
    /// The incarnation watched and since when (its grant as this proxy
    /// saw it, or its release).
    seen: Option<(u64, Instant)>,
}

impl Silence {
    pub(super) fn new(limit: Duration) -> Self {
        Silence { limit, seen: None }
    }

    /// The limit, in whole seconds (for messages).
    pub(super) fn secs(&self) -> u64 {
        self.limit.as_secs()
    }

    /// Its worker released it (a drain's hand-back): the clock restarts,
    /// so the next claim takes it over.
    pub(super) fn restart(&mut self, now: Instant) {
        if let Some((_, since)) = &mut self.seen {
            *since = now;
        }
    }

    /// `running`: the incarnation in effect and when it was last heard
    /// from ([`crate::fence::Fence::running`]). The incarnation, when it
    /// has been silent for the limit.
    pub(super) fn gone(
        &mut self,
        running: Option<(u64, Option<Instant>)>,
        now: Instant,
    ) -> Option<u64> {
        let Some((incarnation, heard)) = running else {
            self.seen = None;
            return None;
        };
        let since = match self.seen {
            Some((watched, since)) if watched == incarnation => since,
            _ => {
                self.seen = Some((incarnation, now));
                now
            }
        };
        let last = heard.map_or(since, |h| h.max(since));
        (now.saturating_duration_since(last) >= self.limit).then_some(incarnation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(3);

    #[test]
    fn an_incarnation_silent_for_the_limit_is_gone() {
        let t0 = Instant::now();
        let mut s = Silence::new(LIMIT);
        // Nothing runs: never gone.
        assert_eq!(s.gone(None, t0 + LIMIT * 9), None);
        // Granted at t0, never heard from: gone at the limit.
        assert_eq!(s.gone(Some((1, None)), t0), None);
        assert_eq!(s.gone(Some((1, None)), t0 + LIMIT / 2), None);
        assert_eq!(s.gone(Some((1, None)), t0 + LIMIT), Some(1));
        // Heard from: the clock runs from the heartbeat.
        let hb = t0 + LIMIT;
        assert_eq!(s.gone(Some((1, Some(hb))), hb + LIMIT / 2), None);
        assert_eq!(s.gone(Some((1, Some(hb))), hb + LIMIT), Some(1));
    }

    #[test]
    fn a_new_incarnation_or_a_release_restarts_the_clock() {
        let t0 = Instant::now();
        let mut s = Silence::new(LIMIT);
        assert_eq!(s.gone(Some((1, Some(t0))), t0), None);
        // A heartbeat from before this proxy watched (a replayed stream)
        // counts from when it started watching.
        let t1 = t0 + LIMIT * 2;
        assert_eq!(s.gone(Some((2, Some(t0))), t1), None);
        assert_eq!(s.gone(Some((2, Some(t0))), t1 + LIMIT / 2), None);
        // Released: heard no more, the clock from the release.
        let t2 = t1 + LIMIT / 2;
        s.restart(t2);
        assert_eq!(s.gone(Some((2, None)), t2 + LIMIT / 2), None);
        assert_eq!(s.gone(Some((2, None)), t2 + LIMIT), Some(2));
    }
}
