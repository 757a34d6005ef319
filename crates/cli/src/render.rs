//! Human output of `troupe exec`: streamed text, one line per tool call.
//! It is an exporter of the session log, so it shows events in gate order
//! once they are durable.

use std::collections::HashMap;
use std::io::Write;

use troupe_protocol::{ItemDetails, ItemStatus, ThreadEvent, ToolOutcome};
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
}

impl<W: Write + Send> HumanRenderer<W> {
    /// A renderer writing to `out`.
    pub fn new(out: W) -> Self {
        HumanRenderer {
            out,
            printed: HashMap::new(),
            open_line: false,
            last_agent: None,
        }
    }

    fn line(&mut self, text: &str) -> std::io::Result<()> {
        if self.open_line {
            writeln!(self.out)?;
            self.open_line = false;
        }
        writeln!(self.out, "{text}")
    }

    fn render(&mut self, event: ThreadEvent) -> std::io::Result<()> {
        match event {
            ThreadEvent::ItemUpdated(e) | ThreadEvent::ItemCompleted(e) => {
                if let ItemDetails::AgentMessage(m) = &e.item.details {
                    // Item ids are unique within a thread; agents share the
                    // stream, so key by agent too.
                    let key = format!("{}\u{0}{}", e.agent_id.as_deref().unwrap_or(""), e.item.id);
                    let done = self.printed.entry(key).or_insert(0);
                    if let Some(new) = m.text.get(*done..).filter(|s| !s.is_empty()) {
                        let agent = e.agent_id.clone();
                        if self.open_line && self.last_agent != agent {
                            writeln!(self.out)?;
                        }
                        self.last_agent = agent;
                        write!(self.out, "{new}")?;
                        self.open_line = !new.ends_with('\n');
                        *done = m.text.len();
                    }
                    return Ok(());
                }
                self.item(e.item.details)
            }
            ThreadEvent::ItemStarted(e) => match e.item.details {
                ItemDetails::ToolInvocation(call) => {
                    let args = one_line(&call.arguments.to_string(), 100);
                    self.line(&format!("→ {} {args}", call.tool_name))
                }
                _ => Ok(()),
            },
            ThreadEvent::Error(e) => self.line(&format!("! {}", e.message)),
            ThreadEvent::TurnFailed(e) => self.line(&format!("! turn failed: {}", e.message)),
            _ => Ok(()),
        }
    }

    fn item(&mut self, details: ItemDetails) -> std::io::Result<()> {
        match details {
            ItemDetails::ToolOutput(o) => {
                let declined = matches!(
                    o.outcome,
                    Some(ToolOutcome::PermissionRejected | ToolOutcome::HookDenied)
                );
                let mark = match o.status {
                    ItemStatus::Completed => "✓",
                    _ if declined => "⊘",
                    _ => "✗",
                };
                let first = one_line(o.output.lines().next().unwrap_or(""), 100);
                self.line(&format!("  {mark} {first}"))
            }
            ItemDetails::FileChange(c) => {
                for ch in c.changes {
                    self.line(&format!("  ~ {:?} {}", ch.kind, ch.path).to_lowercase())?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
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
