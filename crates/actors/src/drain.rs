//! The canonical persistence drain as a supervised actor.
//!
//! The events themselves never pass through the mailbox: producers hand
//! them to the session log's bounded gate. The drain owns the session's
//! log writer that empties the gate (on the process's shared writer
//! thread or a thread of its own), and serves `Flush {ack}` and
//! `Shutdown {ack}`. When the writer fails, the drain fails, and its
//! supervisor restarts it (it is `permanent`); the new incarnation cuts the
//! partial write and writes the uncommitted batch again, so no accepted
//! event is lost or written twice.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use troupe_runtime::store::{SessionLog, StoreError, WriterHandle};

use crate::address::Address;

/// Why a flush or a shutdown of the drain did not complete.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// The accepted events did not become durable (in time).
    #[error(transparent)]
    Flush(StoreError),
    /// The log could not be completed on disk at shutdown.
    #[error("{source}; {missing} accepted events are not on disk")]
    Incomplete {
        /// Why the writer did not finish.
        #[source]
        source: StoreError,
        /// Accepted events that are not durable.
        missing: u64,
    },
}

/// Messages of the [`DrainActor`].
pub enum DrainMsg {
    /// Reply once every event accepted before this message is durable.
    Flush {
        /// Gets `Ok` when durable, or why not.
        ack: RpcReplyPort<Result<(), DrainError>>,
    },
    /// Close the log: refuse new events, write and sync every accepted one,
    /// write the final manifest, then reply.
    Shutdown {
        /// Gets `Ok` once the log is complete on disk, or why not.
        ack: RpcReplyPort<Result<(), DrainError>>,
    },
    /// Sent by the log writer when it ends.
    WriterExited(Result<(), String>),
}

/// The drain actor. It holds no configuration; see [`DrainArgs`].
pub struct DrainActor;

/// What a drain incarnation needs.
#[derive(Clone)]
pub struct DrainArgs {
    /// The session log whose writer it runs.
    pub log: SessionLog,
    /// Its logical address, updated at every (re)start.
    pub address: Address<DrainMsg>,
    /// Longest wait for a flush or a shutdown.
    pub timeout: Duration,
}

/// State of one incarnation.
pub struct DrainState {
    args: DrainArgs,
    writer: Option<WriterHandle>,
}

impl Actor for DrainActor {
    type Msg = DrainMsg;
    type State = DrainState;
    type Arguments = DrainArgs;

    /// Trivial on purpose: a failure here would reach no supervisor.
    async fn pre_start(
        &self,
        _myself: ActorRef<DrainMsg>,
        args: DrainArgs,
    ) -> Result<DrainState, ActorProcessingErr> {
        Ok(DrainState { args, writer: None })
    }

    async fn post_start(
        &self,
        myself: ActorRef<DrainMsg>,
        state: &mut DrainState,
    ) -> Result<(), ActorProcessingErr> {
        let me = myself.clone();
        let writer = state.args.log.start_writer(move |result| {
            let _ = me.cast(DrainMsg::WriterExited(
                result.as_ref().map(|_| ()).map_err(ToString::to_string),
            ));
        })?;
        state.writer = Some(writer);
        state.args.address.set(myself);
        Ok(())
    }

    /// A writer that finished (the log closed and drained) is ending:
    /// wait for its thread, so that its hold on the log, and with the last
    /// hold the session's claim (a lock on its log), is gone before the
    /// process exits, and its last batch and manifest are written.
    async fn post_stop(
        &self,
        _myself: ActorRef<DrainMsg>,
        state: &mut DrainState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(w) = state.writer.take()
            && state.args.log.progress().borrow().finished
        {
            let join = tokio::task::spawn_blocking(move || w.join());
            let _ = tokio::time::timeout(state.args.timeout, join).await;
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<DrainMsg>,
        msg: DrainMsg,
        state: &mut DrainState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            DrainMsg::Flush { ack } => {
                let log = state.args.log.clone();
                let timeout = state.args.timeout;
                // Waiting here would block Shutdown and WriterExited; the
                // waiter ends when the events are durable or at the timeout.
                tokio::spawn(async move {
                    let _ = ack.send(log.flush(timeout).await.map_err(DrainError::Flush));
                });
            }
            DrainMsg::Shutdown { ack } => {
                let log = state.args.log.clone();
                let timeout = state.args.timeout;
                log.close();
                tokio::spawn(async move {
                    let r = log.wait_finished(timeout).await.map_err(|source| {
                        let (accepted, _) = log.counts();
                        let durable = log.progress().borrow().committed;
                        DrainError::Incomplete {
                            source,
                            missing: accepted.saturating_sub(durable),
                        }
                    });
                    let _ = ack.send(r);
                });
            }
            DrainMsg::WriterExited(result) => {
                if let Some(w) = state.writer.take() {
                    // The thread is ending; join it off the async runtime.
                    let _ = tokio::task::spawn_blocking(move || w.join()).await;
                }
                if let Err(e) = result {
                    // Fail: the supervisor restarts us with a new writer.
                    return Err(Box::new(StoreError::Writer(e)));
                }
            }
        }
        Ok(())
    }
}
