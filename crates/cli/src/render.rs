//! Human output of `troupe exec`, `run` and `demo`: streamed text, one line
//! per tool call. It is an exporter of the session log, so it shows events
//! in gate order once they are durable.
//!
//! When more than one agent speaks (subagents, a pipeline's proposers and
//! verifiers), every line carries the speaking agent's name.

use std::collections::HashMap;
use std::io::Write;

use troupe_protocol::{ItemDetails, ItemStatus, ThreadEvent, ToolOutcome, ToolOutputItem};
use troupe_runtime::store::Exporter;

/// Renders events for a person.
pub struct HumanRenderer<W: Write + Send> {
    out: W,
    /// Bytes of each agent_message item already printed.
    printed: HashMap<String, usize>,
    /// The last print ended without a newline.
    open_line: bool,
    /// The agent whose text was printed last.
    last_agent: Option<String>,
    /// Label every line with its agent (pipelines); otherwise only the
    /// lines of agents other than the root are labelled.
    label_all: bool,
    /// The message of the last `turn.failed`: the warning that repeats it
    /// is not printed again.
    last_failure: Option<String>,
}

impl<W: Write + Send> HumanRenderer<W> {
    /// A renderer writing to `out` for a single root agent.
    pub fn new(out: W) -> Self {
        HumanRenderer {
            out,
            printed: HashMap::new(),
            open_line: false,
            last_agent: None,
            label_all: false,
            last_failure: None,
        }
    }

    /// A renderer that labels every line with its agent.
    pub fn labelled(out: W) -> Self {
        HumanRenderer {
            label_all: true,
            ..HumanRenderer::new(out)
        }
    }

    /// `name: ` for a labelled agent, else nothing.
    fn label(&self, agent: Option<&str>) -> String {
        let Some(agent) = agent else {
            return String::new();
        };
        let name = agent.rsplit('/').next().unwrap_or(agent);
        if !self.label_all && name == "root" {
            return String::new();
        }
        format!("{name}: ")
    }

    fn line(&mut self, agent: Option<&str>, text: &str) -> std::io::Result<()> {
        if self.open_line {
            writeln!(self.out)?;
            self.open_line = false;
        }
        let label = self.label(agent);
        writeln!(self.out, "{label}{text}")
    }

    /// Streams new text of an agent's message, starting each line with its
    /// label.
    fn text(&mut self, agent: Option<&str>, new: &str) -> std::io::Result<()> {
        let agent = agent.map(str::to_string);
        if self.open_line && self.last_agent != agent {
            writeln!(self.out)?;
            self.open_line = false;
        }
        self.last_agent = agent.clone();
        let label = self.label(agent.as_deref());
        for piece in new.split_inclusive('\n') {
            if !self.open_line {
                write!(self.out, "{label}")?;
            }
            write!(self.out, "{piece}")?;
            self.open_line = !piece.ends_with('\n');
        }
        Ok(())
    }

    fn render(&mut self, event: ThreadEvent) -> std::io::Result<()> {
        match event {
            ThreadEvent::ItemUpdated(e) | ThreadEvent::ItemCompleted(e) => {
                let agent = e.agent_id.as_deref();
                if let ItemDetails::AgentMessage(m) = &e.item.details {
                    // Item ids are unique within a thread; agents share the
                    // stream, so key by agent too.
                    let key = format!("{}\u{0}{}", agent.unwrap_or(""), e.item.id);
                    let done = *self.printed.get(&key).unwrap_or(&0);
                    if let Some(new) = m.text.get(done..).filter(|s| !s.is_empty()) {
                        self.text(agent, new)?;
                        self.printed.insert(key, m.text.len());
                    }
                    return Ok(());
                }
                let merge = e.item.id.starts_with("merge-");
                self.item(agent, e.item.details, merge)
            }
            ThreadEvent::ItemStarted(e) => match e.item.details {
                ItemDetails::ToolInvocation(call) => {
                    let args = one_line(&call.arguments.to_string(), 100);
                    self.line(
                        e.agent_id.as_deref(),
                        &format!("→ {} {args}", call.tool_name),
                    )
                }
                _ => Ok(()),
            },
            ThreadEvent::ApprovalRequested(r) => {
                let what = r.subject.clone().unwrap_or_else(|| r.arguments.to_string());
                self.line(
                    r.agent_id.as_deref(),
                    &format!(
                        "? waiting for approval {}: {} {} ({}); decide with `troupe approvals approve|deny {}`",
                        r.approval_id,
                        r.tool,
                        one_line(&what, 100),
                        one_line(&r.reason, 100),
                        r.approval_id
                    ),
                )
            }
            ThreadEvent::ApprovalResolved(r) => self.line(
                r.agent_id.as_deref(),
                &format!("  approval {}: {} by {}", r.approval_id, r.decision, r.by),
            ),
            ThreadEvent::Error(e) => {
                if self.last_failure.take().as_deref() == Some(e.message.as_str()) {
                    return Ok(());
                }
                self.line(None, &format!("! {}", e.message))
            }
            ThreadEvent::TurnFailed(e) => {
                self.last_failure = Some(e.message.clone());
                self.line(
                    e.agent_id.as_deref(),
                    &format!("! turn failed: {}", e.message),
                )
            }
            _ => Ok(()),
        }
    }

    fn item(
        &mut self,
        agent: Option<&str>,
        details: ItemDetails,
        merge: bool,
    ) -> std::io::Result<()> {
        match details {
            ItemDetails::ToolOutput(o) => self.line(agent, &format!("  {}", tool_result(&o))),
            ItemDetails::FileChange(c) => {
                let what = if merge {
                    "merged into the workspace"
                } else {
                    "edited"
                };
                for ch in c.changes {
                    let kind = format!("{:?}", ch.kind).to_lowercase();
                    self.line(agent, &format!("  ~ {kind} {} ({what})", ch.path))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// `✓ first line`, `✗ exit 1 · first line of its output`, `⊘ ...`: a
/// process that exited non-zero failed, whatever the call's status.
pub fn tool_result(o: &ToolOutputItem) -> String {
    // A process tool's output is a header, `---`, then what it printed.
    let body = o
        .output
        .split_once("\n---\n")
        .map_or(o.output.as_str(), |(_, body)| body);
    let first = one_line(
        body.lines().find(|l| !l.trim().is_empty()).unwrap_or(""),
        100,
    );
    let declined = matches!(
        o.outcome,
        Some(ToolOutcome::PermissionRejected | ToolOutcome::HookDenied)
    );
    match (o.status, o.exit_code) {
        _ if declined => format!("⊘ {first}"),
        (ItemStatus::Completed, Some(0)) => format!("✓ exit 0 · {first}"),
        (_, Some(code)) => format!("✗ exit {code} · {first}"),
        (ItemStatus::Completed, None) => format!("✓ {first}"),
        (_, None) => format!("✗ {first}"),
    }
}

fn one_line(s: &str, max: usize) -> String {
    let s = s.replace(['\n', '\r'], " ");
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

impl<W: Write + Send> Exporter for HumanRenderer<W> {
    fn name(&self) -> &str {
        "human output"
    }

    fn export(&mut self, _line: &[u8], event: &[u8]) -> std::io::Result<()> {
        match serde_json::from_slice::<ThreadEvent>(event) {
            Ok(ev) => self.render(ev),
            Err(_) => Ok(()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    fn finish(&mut self) -> std::io::Result<()> {
        if self.open_line {
            writeln!(self.out)?;
            self.open_line = false;
        }
        self.out.flush()
    }
}

/// `success in 1 turn`, `error_max_turns (max_turns) in 3 turns`: the
/// outcome code only when it says more than the subtype.
pub fn outcome(done: &troupe_protocol::ThreadCompletedEvent) -> String {
    let subtype = done.subtype.to_string();
    let code = if done.outcome_code.is_empty() || done.outcome_code == subtype {
        String::new()
    } else {
        format!(" ({})", done.outcome_code)
    };
    format!(
        "{subtype}{code} in {}",
        plural(u64::from(done.num_turns), "turn")
    )
}

/// The closing line of a run's human summary: `— <outcome> · <tokens> ·
/// <cost>`, after a blank line.
pub fn totals(done: &troupe_protocol::ThreadCompletedEvent) -> String {
    format!(
        "\n— {} · {} input / {} output tokens · {}",
        outcome(done),
        done.usage.input_tokens,
        done.usage.output_tokens,
        cost(done.total_cost_usd)
    )
}

/// `1 turn`, `2 turns`.
pub fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `$0.0123`, or `cost unknown` when any price was unknown.
pub fn cost(cost: Option<f64>) -> String {
    cost.map_or_else(|| "cost unknown".into(), |c| format!("${c:.4}"))
}

/// A summary written to a pipe whose reader went away is not an error:
/// the run's own exit code stands.
pub fn unless_pipe_closed(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// A writer whose reader may go away (`troupe exec | head -1`): once the
/// pipe is closed, what is written is dropped instead of failing, so the
/// run goes on and no exporter is reported as failed.
pub struct PipeWriter<W: Write> {
    inner: W,
    closed: bool,
}

impl<W: Write> PipeWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        PipeWriter {
            inner,
            closed: false,
        }
    }

    fn guard<T>(&mut self, r: std::io::Result<T>, none: T) -> std::io::Result<T> {
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(none)
            }
            other => other,
        }
    }
}

impl<W: Write> Write for PipeWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let r = self.inner.write(buf);
        self.guard(r, buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.inner.flush();
        self.guard(r, ())
    }
}
