//! The VerifierActor: a temporary child that judges one proposal with the
//! runtime's read-only verifier, sharing no context with the proposer.
//!
//! It receives only the proposal (`VerifyRequest`: the handoff, base and
//! head commits, the worktree path); its tools are read-only, plus
//! exec_command under Landlock; it answers with a structured `Verdict`. A
//! run that ends without a valid verdict is a rejection whose finding says
//! why; approval is never inferred from prose.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::task::JoinHandle;
use tracing::Instrument as _;
use troupe_protocol::Verdict;
use troupe_runtime::agent::LogSink;
use troupe_runtime::verifier::{Ran, VerifierSettings, VerifyRequest, run_verifier};

use crate::agent::env::AgentEnv;

/// Messages of the [`VerifierActor`].
pub enum VerifierMsg {
    /// Judge one proposal; the reply is the review (a rejection when the
    /// verifier could not decide).
    Verify(Box<VerifyRequest>, RpcReplyPort<Review>),
}

/// A verifier's review: its verdict and the evidence beside it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Review {
    /// The verdict as recorded (its checks are the log's runs).
    pub verdict: Verdict,
    /// Every command the verifier ran on the head.
    pub ran: Vec<Ran>,
    /// Its verdict was inconsistent with the log twice (failed closed).
    pub inconsistent: bool,
}

impl Review {
    /// A review that is only a rejection (the verifier could not decide).
    pub fn rejection(verdict: Verdict) -> Self {
        Review {
            verdict,
            ..Review::default()
        }
    }
}

/// The verifier actor.
pub struct VerifierActor;

/// What a verifier needs.
pub struct VerifierArgs {
    /// The session (model client, catalog, log).
    pub env: Arc<AgentEnv>,
    /// The model to judge with.
    pub model: String,
    /// Sandbox, limits, name.
    pub settings: VerifierSettings,
    /// The span its run goes under (docs/telemetry.md): the one current
    /// where the verification started (a `verify_change` tool call).
    pub span: tracing::Span,
}

/// One verifier's state: the run it owns.
pub struct VerifierState {
    args: VerifierArgs,
    run: Option<JoinHandle<()>>,
}

impl Actor for VerifierActor {
    type Msg = VerifierMsg;
    type State = VerifierState;
    type Arguments = VerifierArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<VerifierMsg>,
        args: VerifierArgs,
    ) -> Result<VerifierState, ActorProcessingErr> {
        Ok(VerifierState { args, run: None })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<VerifierMsg>,
        state: &mut VerifierState,
    ) -> Result<(), ActorProcessingErr> {
        state.args.settings.cancel.cancel();
        if let Some(run) = state.run.take() {
            run.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<VerifierMsg>,
        msg: VerifierMsg,
        state: &mut VerifierState,
    ) -> Result<(), ActorProcessingErr> {
        let VerifierMsg::Verify(request, reply) = msg;
        let env = Arc::clone(&state.args.env);
        let model = state.args.model.clone();
        let settings = state.args.settings.clone();
        let span = state.args.span.clone();
        // The run is owned by this actor: stopping it aborts the run.
        state.run = Some(tokio::spawn(
            async move {
                let sink = Arc::new(LogSink::new(env.log.clone(), Duration::from_secs(30)));
                let review = match run_verifier(
                    &request,
                    Arc::clone(&env.client),
                    &model,
                    Arc::clone(&env.catalog),
                    sink,
                    settings,
                )
                .await
                {
                    Ok(outcome) => Review {
                        verdict: outcome.verdict,
                        ran: outcome.ran,
                        inconsistent: outcome.inconsistent,
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "verifier could not decide; rejecting");
                        Review::rejection(e.rejection())
                    }
                };
                let _ = reply.send(review);
            }
            .instrument(span),
        ));
        Ok(())
    }
}
