//! A schedule of faults for one session, drawn from a seed: which faults,
//! at what delay after a worker first runs a task, held for how long, on
//! which worker, and the session's shape (workers, approvals).

use std::fmt;

/// A fault the suite injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// SIGKILL of a worker (a fresh worker replaces it).
    WorkerKill,
    /// SIGSTOP of a worker, SIGCONT after the hold.
    WorkerStop,
    /// SIGKILL of the coordinator, then `troupe sessions resume ID --nats`.
    CoordinatorKill,
    /// SIGSTOP of the coordinator, SIGCONT after the hold.
    CoordinatorStop,
    /// `nats-server` SIGKILLed and started again on its file store.
    NatsRestart,
    /// A worker's network namespace link cut, restored after the hold.
    Partition,
    /// A worker's work dir (its own tmpfs) filled up, freed after the hold.
    DiskFull,
}

impl Kind {
    /// Every kind, in table order.
    pub const ALL: [Kind; 7] = [
        Kind::WorkerKill,
        Kind::WorkerStop,
        Kind::CoordinatorKill,
        Kind::CoordinatorStop,
        Kind::NatsRestart,
        Kind::Partition,
        Kind::DiskFull,
    ];

    /// Its name in schedules and the summary.
    pub fn name(self) -> &'static str {
        match self {
            Kind::WorkerKill => "worker SIGKILL",
            Kind::WorkerStop => "worker SIGSTOP/SIGCONT",
            Kind::CoordinatorKill => "coordinator SIGKILL + resume",
            Kind::CoordinatorStop => "coordinator SIGSTOP/SIGCONT",
            Kind::NatsRestart => "nats-server restart",
            Kind::Partition => "worker partition (netns)",
            Kind::DiskFull => "worker disk full (tmpfs)",
        }
    }

    /// Whether it targets a worker.
    pub fn on_worker(self) -> bool {
        matches!(
            self,
            Kind::WorkerKill | Kind::WorkerStop | Kind::Partition | Kind::DiskFull
        )
    }
}

/// One fault of a schedule.
#[derive(Debug, Clone)]
pub struct Fault {
    /// What.
    pub kind: Kind,
    /// Delay after the previous fault (the first: after a worker first
    /// logs `running`).
    pub delay_ms: u64,
    /// How long a stop, cut or full disk lasts; for a coordinator kill,
    /// the pause before the resume.
    pub hold_ms: u64,
    /// Which worker: the `pick`th of those running a task, else worker
    /// `pick % workers`.
    pub pick: usize,
}

/// The faults and shape of one session.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Workers started (2 or 3).
    pub workers: usize,
    /// The coordinator runs `-a untrusted` and an approver decides every
    /// request from another process (`troupe approvals approve`).
    pub approvals: bool,
    /// The faults, in order.
    pub faults: Vec<Fault>,
}

/// The seed of schedule `index` of a run seeded `seed`.
pub fn session_seed(seed: u64, index: usize) -> u64 {
    seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Draws schedule `index` of the run seeded `seed`, from the kinds
/// `enabled` (kinds this machine cannot inject are left out).
pub fn draw(seed: u64, index: usize, enabled: &[Kind]) -> Schedule {
    let mut rng = fastrand::Rng::with_seed(session_seed(seed, index));
    let workers = rng.usize(2..=3);
    let approvals = rng.u8(0..3) == 0;
    let n = rng.usize(1..=3);
    let faults = (0..n)
        .map(|_| {
            let kind = enabled[rng.usize(0..enabled.len())];
            let hold_ms = match kind {
                Kind::WorkerStop => rng.u64(500..=5000),
                Kind::CoordinatorStop => rng.u64(300..=3000),
                Kind::Partition => rng.u64(1000..=6000),
                Kind::DiskFull => rng.u64(1000..=4000),
                Kind::CoordinatorKill => rng.u64(0..=1000),
                Kind::WorkerKill | Kind::NatsRestart => 0,
            };
            Fault {
                kind,
                delay_ms: rng.u64(0..=1500),
                hold_ms,
                pick: rng.usize(0..3),
            }
        })
        .collect();
    Schedule {
        workers,
        approvals,
        faults,
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} workers{}:",
            self.workers,
            if self.approvals { ", approvals" } else { "" }
        )?;
        for (i, x) in self.faults.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            write!(f, "{sep}+{}ms {}", x.delay_ms, x.kind.name())?;
            if x.kind.on_worker() {
                write!(f, " (pick {})", x.pick)?;
            }
            if x.hold_ms > 0 {
                write!(f, " hold {}ms", x.hold_ms)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_schedule() {
        let a = draw(7, 3, &Kind::ALL).to_string();
        let b = draw(7, 3, &Kind::ALL).to_string();
        assert_eq!(a, b);
        assert_ne!(a, draw(8, 3, &Kind::ALL).to_string());
    }
}
