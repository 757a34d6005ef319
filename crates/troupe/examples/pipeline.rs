//! A pipeline in a library session: parallel proposers, each in its own
//! git worktree, a read-only verifier for each change, serialized merges.
//! Usage: `pipeline REPO PIPELINE.toml` (the format of `troupe run`,
//! docs/pipeline.md) with `OPENAI_BASE_URL` / `OPENAI_API_KEY` as in the
//! quickstart (one of them is required: `troupe demo` is the offline
//! pipeline). Exits 1 unless every proposal merged.
#![allow(clippy::print_stdout, clippy::print_stderr)]
use std::sync::Arc;

use troupe::prelude::*;
use troupe::runtime::verifier::VerifierSettings;
use troupe::{PipelineRun, PipelineSpec, ProposalStatus, run_pipeline};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(repo), Some(spec_path)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: pipeline REPO PIPELINE.toml");
        std::process::exit(2);
    };
    let spec_path = std::path::Path::new(spec_path);
    let spec = PipelineSpec::parse(&std::fs::read_to_string(spec_path)?, spec_path)?;
    let url = match (
        std::env::var("OPENAI_BASE_URL")
            .ok()
            .filter(|u| !u.is_empty()),
        std::env::var_os("OPENAI_API_KEY").is_some_and(|k| !k.is_empty()),
    ) {
        (Some(url), _) => url,
        (None, true) => "https://api.openai.com/v1".into(),
        (None, false) => {
            eprintln!(
                "pipeline: set OPENAI_BASE_URL (an OpenAI-compatible server) or OPENAI_API_KEY (OpenAI); `troupe demo` runs a pipeline offline"
            );
            std::process::exit(2);
        }
    };
    let session = Session::builder(repo)
        .openai_compatible(url)
        .builtin_tools(true)
        .build()
        .await?;
    let run = PipelineRun {
        tree: session.tree(),
        env: Arc::clone(session.env()),
        verifier: VerifierSettings::default().with_config(session.config()),
        cancel: Default::default(),
    };
    let mut all_merged = true;
    for report in run_pipeline(&run, &spec).await? {
        println!(
            "{}: {:?} after {} rounds",
            report.name, report.status, report.rounds
        );
        all_merged &= matches!(report.status, ProposalStatus::Merged { .. });
    }
    session.close().await?;
    if !all_merged {
        eprintln!("pipeline: not every proposal merged (see above)");
        std::process::exit(1);
    }
    Ok(())
}
