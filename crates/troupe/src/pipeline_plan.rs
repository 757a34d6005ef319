//! A pipeline proposer's `mode = "plan"` step, and the handoffs the next
//! round of a proposer starts from (docs/pipeline.md).
//!
//! The planning step is its own agent (`<proposer>-plan`) in the
//! proposer's worktree: plan mode tools (write and exec refused), the
//! `read-only` sandbox, no subagents. Its final answer is the plan. The
//! build agent is a new agent, so nothing of the planning conversation
//! reaches it (a fresh build context): it gets the plan as the previous
//! agent's handoff in its orientation.

use troupe_actors::gates::Judgement;
use troupe_protocol::{CompletionSubtype, HandoffRequest};
use troupe_runtime::tools::SandboxMode;

use crate::pipeline::{PipelineRun, ProposerSpec, run_agent};
use troupe_actors::agent::{AgentSpec, Isolation};

/// Appended to a planning step's task.
const PLAN_PROMPT: &str = "\n\nYou are in PLAN MODE: read-only. Read and search the code; \
write_file, edit_file and exec_command are refused. When you understand the task, answer with \
the plan and call no tool: a short summary, then the steps as a list, each one change or check \
the build agent can do.";

/// Runs proposer `p`'s planning step in `wt`; returns the handoff
/// (markdown) its build agent starts from.
pub(crate) async fn plan_step(
    run: &PipelineRun<'_>,
    p: &ProposerSpec,
    wt: &troupe_worktree::Worktree,
) -> Result<String, String> {
    let env = &run.env;
    let sandbox = troupe_actors::subagent::child_sandbox(
        env.sandbox,
        Some(SandboxMode::ReadOnly),
        Isolation::Worktree,
    )
    .map_err(|e| format!("proposer `{}`: {e}", p.name))?;
    let name = format!("{}-plan", p.name);
    let agent_id = format!("{}/{name}", run.tree.supervisor_address().name());
    let spec = AgentSpec {
        name,
        task: format!("{}{PLAN_PROMPT}", p.task),
        model: p.model.clone(),
        max_turns: Some(p.max_turns.unwrap_or(env.max_turns)),
        sandbox,
        plan_mode: true,
        protect: p.protect.clone(),
        ..AgentSpec::default()
    };
    let outcome = run_agent(run, p, &agent_id, spec, false, wt.path()).await?;
    let done = outcome.completed;
    let plan = done.result.filter(|r| !r.trim().is_empty());
    match (done.subtype, plan) {
        (CompletionSubtype::Success, Some(plan)) => Ok(plan_handoff(p, &plan).to_markdown()),
        (subtype, _) => Err(format!(
            "proposer `{}`: its planning step ended as {} without a plan",
            p.name,
            subtype.as_str()
        )),
    }
}

/// The planning step's handoff to the build agent.
fn plan_handoff(p: &ProposerSpec, plan: &str) -> HandoffRequest {
    HandoffRequest {
        target: format!("{} (build)", p.name),
        state_summary: format!(
            "A read-only planning agent wrote this plan; nothing is changed yet.\n\n## Plan\n{}",
            plan.trim()
        ),
        next_actions: vec![
            "Implement the plan step by step, run the checks, then call `handoff`.".into(),
        ],
        task_context: p.task.clone(),
        ..HandoffRequest::default()
    }
}

/// What round N+1 of a proposer starts from: round N's handoff and why
/// it did not pass (the gate, the findings, the failing checks).
pub(crate) fn rejected_handoff(handoff: &HandoffRequest, judgement: &Judgement) -> String {
    format!(
        "{}\n## Not accepted: {}\n{}",
        handoff.to_markdown(),
        judgement.gate.code(),
        judgement.feedback()
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use crate::pipeline::{PipelineSpec, ProposerMode};

    #[test]
    fn mode_parses_and_bad_modes_or_clashing_planners_are_named() {
        let p = Path::new("p.toml");
        let spec = PipelineSpec::parse(
            "[[proposers]]\nname = \"a\"\nmode = \"plan\"\ntask = \"t\"\n",
            p,
        )
        .unwrap();
        assert_eq!(spec.proposers[0].mode, ProposerMode::Plan);
        let default =
            PipelineSpec::parse("[[proposers]]\nname = \"a\"\ntask = \"t\"\n", p).unwrap();
        assert_eq!(default.proposers[0].mode, ProposerMode::Build);
        let bad = PipelineSpec::parse(
            "[[proposers]]\nname = \"a\"\nmode = \"dream\"\ntask = \"t\"\n",
            p,
        )
        .unwrap_err()
        .to_string();
        assert!(bad.contains("dream") && bad.contains("plan"), "{bad}");
        let clash = PipelineSpec::parse(
            "[[proposers]]\nname = \"a\"\nmode = \"plan\"\ntask = \"t\"\n[[proposers]]\nname = \"a-plan\"\ntask = \"u\"\n",
            p,
        )
        .unwrap_err()
        .to_string();
        assert!(clash.contains("plans as `a-plan`"), "{clash}");
    }

    #[test]
    fn a_proposer_sets_its_reasoning_effort() {
        use troupe_runtime::provider::ReasoningEffort;
        let p = Path::new("p.toml");
        let text = "[[proposers]]\nname = \"a\"\ntask = \"t\"\nreasoning_effort = \"high\"\n";
        let spec = PipelineSpec::parse(text, p).unwrap();
        assert_eq!(
            spec.proposers[0].reasoning_effort,
            Some(ReasoningEffort::High)
        );
        let bad = PipelineSpec::parse(&text.replace("high", "max"), p)
            .unwrap_err()
            .to_string();
        assert!(bad.contains("max") && bad.contains("minimal"), "{bad}");
    }
}
