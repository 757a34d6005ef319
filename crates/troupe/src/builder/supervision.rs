//! `[supervision]` of troupe.toml as the actors' supervision settings.

use std::time::Duration;

use troupe_actors::supervisor::{Intensity, RestartPolicy, Strategy};
use troupe_actors::tree::SupervisionSettings;
use troupe_runtime::config::{ChildRestart, SupervisionConfig, SupervisionStrategy};

/// The session defaults of every agent's supervisor node.
pub(crate) fn settings(config: &SupervisionConfig) -> SupervisionSettings {
    SupervisionSettings {
        strategy: match config.strategy {
            SupervisionStrategy::OneForOne => Strategy::OneForOne,
            SupervisionStrategy::OneForAll => Strategy::OneForAll,
            SupervisionStrategy::RestForOne => Strategy::RestForOne,
        },
        intensity: Intensity {
            max_restarts: config.max_restarts,
            within: Duration::from_secs(config.within_secs.max(1)),
        },
        restart: match config.restart {
            ChildRestart::Permanent => RestartPolicy::Permanent,
            ChildRestart::Transient => RestartPolicy::Transient,
            ChildRestart::Temporary => RestartPolicy::Temporary,
        },
        max_restarts_limit: config.max_restarts_limit,
        ..SupervisionSettings::default()
    }
}
