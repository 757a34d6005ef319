//! The tool catalog: registration, the model-facing definitions in name
//! order, argument validation and the permission check.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::exec::{ExecCommandTool, ExecConfig};
use super::grep::GrepTool;
use super::list::ListFilesTool;
use super::read::ReadFileTool;
use super::write::{EditFileTool, WriteFileTool};
use super::{Capability, PermissionPolicy, ProtectedPaths, SharedTool, ToolError, schema};
use crate::provider::ToolDefinition;

/// Bounds on what a model may ask of the tools in one step (`[tools]
/// max_calls_per_step`, `max_argument_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// Calls run per step; the ones past it are answered with an error.
    pub max_calls_per_step: usize,
    /// Bytes of one call's arguments, as the model sent them.
    pub max_argument_bytes: usize,
}

impl ToolLimits {
    /// Default `max_calls_per_step`.
    pub const DEFAULT_MAX_CALLS_PER_STEP: usize = 64;
    /// Default `max_argument_bytes`: 1 MiB.
    pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 1024 * 1024;
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            max_calls_per_step: Self::DEFAULT_MAX_CALLS_PER_STEP,
            max_argument_bytes: Self::DEFAULT_MAX_ARGUMENT_BYTES,
        }
    }
}

/// Tools by name, with the permission policy that guards them and the
/// limits on a step's calls.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, SharedTool>,
    policy: PermissionPolicy,
    limits: ToolLimits,
    /// The definitions (each tool's `schema()` called once), built at the
    /// first request and dropped when a tool is registered.
    definitions: std::sync::OnceLock<Vec<ToolDefinition>>,
    /// Where tools that change while the session runs come from.
    pub(super) source: Option<super::source::SourceLink>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry whose policy allows everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every built-in tool, `exec_command` with the default limits.
    pub fn builtin() -> Self {
        Self::builtin_with(ExecConfig::default())
    }

    /// Every built-in tool, `exec_command` with `exec` limits, the write
    /// tools refusing the default [`ProtectedPaths`].
    pub fn builtin_with(exec: ExecConfig) -> Self {
        Self::builtin_configured(exec, ProtectedPaths::default())
    }

    /// Every built-in tool, `exec_command` with `exec` limits, the write
    /// tools refusing `protected`.
    pub fn builtin_configured(exec: ExecConfig, protected: ProtectedPaths) -> Self {
        let mut registry = Self::new();
        registry.register(Arc::new(ReadFileTool));
        registry.register(Arc::new(ListFilesTool));
        registry.register(Arc::new(GrepTool));
        registry.register(Arc::new(WriteFileTool::new(protected.clone())));
        registry.register(Arc::new(EditFileTool::new(protected)));
        registry.register(Arc::new(ExecCommandTool::new(exec)));
        registry
    }

    /// Adds `tool`, replacing (and returning) one of the same name.
    pub fn register(&mut self, tool: SharedTool) -> Option<SharedTool> {
        self.definitions = std::sync::OnceLock::new();
        self.tools.insert(tool.name().to_string(), tool)
    }

    /// Removes the tool named `name` (returning it).
    pub fn unregister(&mut self, name: &str) -> Option<SharedTool> {
        self.definitions = std::sync::OnceLock::new();
        self.tools.remove(name)
    }

    /// This registry with `policy`.
    pub fn with_policy(mut self, policy: PermissionPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Replaces the permission policy.
    pub fn set_policy(&mut self, policy: PermissionPolicy) {
        self.policy = policy;
    }

    /// The permission policy.
    pub fn policy(&self) -> &PermissionPolicy {
        &self.policy
    }

    /// This registry with `limits`.
    pub fn with_limits(mut self, limits: ToolLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The limits on a step's calls.
    pub fn limits(&self) -> ToolLimits {
        self.limits
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<SharedTool> {
        self.tools.get(name).cloned()
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The definitions the model sees, sorted by name.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.shared_definitions().to_vec()
    }

    /// The definitions, built once per catalog: each tool's `schema()` is
    /// called at the first request, not at every one.
    pub fn shared_definitions(&self) -> &[ToolDefinition] {
        self.definitions.get_or_init(|| {
            self.tools
                .values()
                .map(|tool| ToolDefinition {
                    name: tool.name().to_string(),
                    description: tool.description().to_string(),
                    parameters: tool.schema(),
                })
                .collect()
        })
    }

    /// Only the `ReadOnly` tools (for the verifier), with the same policy.
    /// An `exec_command` built with [`ExecConfig::sandbox`] set is
    /// `ReadOnly` and stays; the default one does not.
    pub fn read_only(&self) -> ToolRegistry {
        ToolRegistry {
            tools: self
                .tools
                .iter()
                .filter(|(_, tool)| tool.capability() == Capability::ReadOnly)
                .map(|(name, tool)| (name.clone(), tool.clone()))
                .collect(),
            policy: self.policy.clone(),
            limits: self.limits,
            definitions: std::sync::OnceLock::new(),
            source: None,
        }
    }

    /// Looks the tool up ([`ToolError::UnknownTool`]), parses `args_text`
    /// ([`ToolError::InvalidJson`]; empty text counts as `{}`, which some
    /// providers send for a call with no arguments) and checks it against
    /// the tool's schema ([`ToolError::Schema`], naming the field).
    /// Arguments over the limits' `max_argument_bytes` are refused
    /// ([`ToolError::ArgumentsTooLarge`]) before they are parsed.
    pub fn validate(&self, name: &str, args_text: &str) -> Result<(SharedTool, Value), ToolError> {
        let tool = self.lookup(name)?;
        if args_text.len() > self.limits.max_argument_bytes {
            return Err(ToolError::ArgumentsTooLarge {
                bytes: args_text.len(),
                max: self.limits.max_argument_bytes,
            });
        }
        let text = if args_text.trim().is_empty() {
            "{}"
        } else {
            args_text
        };
        let args: Value =
            serde_json::from_str(text).map_err(|e| ToolError::InvalidJson(e.to_string()))?;
        let defs = self.shared_definitions();
        let cached = defs
            .binary_search_by(|d| d.name.as_str().cmp(name))
            .ok()
            .and_then(|i| defs.get(i));
        match cached {
            Some(def) => schema::validate(&def.parameters, &args),
            None => schema::validate(&tool.schema(), &args),
        }
        .map_err(ToolError::Schema)?;
        Ok((tool, args))
    }

    /// Checks a call against the permission policy
    /// ([`ToolError::Denied`] naming the rule) after looking the tool up
    /// ([`ToolError::UnknownTool`]).
    pub fn check_permission(&self, tool_name: &str, args: &Value) -> Result<(), ToolError> {
        self.lookup(tool_name)?;
        self.policy.check(tool_name, args)
    }

    /// Like [`ToolRegistry::check_permission`], with a path argument
    /// matched in its canonical form: relative to the workspace root, `..`
    /// and `.` folded, symlinks inside the workspace resolved. So
    /// `./secrets/a`, `sub/../secrets/a`, an absolute path or a symlink to
    /// `secrets/` all meet the rule `write_file(secrets/*)`. A path that
    /// cannot be resolved (it escapes) is matched as given; the tool
    /// refuses it anyway.
    pub fn check_permission_in(
        &self,
        tool_name: &str,
        args: &Value,
        workspace: &std::path::Path,
    ) -> Result<(), ToolError> {
        self.lookup(tool_name)?;
        match self.canonical_args(tool_name, args, workspace) {
            Some(normalized) => {
                // Deny rules see both spellings; allow rules the canonical one.
                self.policy.check_deny(tool_name, args)?;
                self.policy.check(tool_name, &normalized)
            }
            None => self.policy.check(tool_name, args),
        }
    }

    /// Decides a call under `approval` and the permission rules
    /// ([`crate::approvals::gate`]), with the path matched as
    /// [`ToolRegistry::check_permission_in`] matches it; `remembered` is the
    /// session's decision for the call's exact subject.
    pub fn gate_in(
        &self,
        tool_name: &str,
        args: &Value,
        workspace: &std::path::Path,
        approval: troupe_protocol::ApprovalPolicy,
        remembered: Option<crate::approvals::Remembered>,
    ) -> crate::approvals::Gate {
        use crate::approvals::{Gate, gate};
        let tool = match self.lookup(tool_name) {
            Ok(tool) => tool,
            Err(e) => return Gate::Deny(e),
        };
        // A tool whose effects are approved elsewhere is decided by the
        // rules alone, as a read-only one is.
        use crate::tools::Capability;
        let capability = if !tool.asks_for_approval() {
            Capability::ReadOnly
        } else if tool.capability() == Capability::ReadOnly
            && tool.asks_when_named()
            && self.policy.ask_rule_naming(tool_name, args).is_some()
        {
            // A read an `ask` rule names asks as a write would (an MCP
            // server's read: `ask = ["read_mcp_resource(secret://*)"]`).
            Capability::Exec
        } else {
            tool.capability()
        };
        match self.canonical_args(tool_name, args, workspace) {
            Some(normalized) => {
                if let Err(e) = self.policy.check_deny(tool_name, args) {
                    return Gate::Deny(e);
                }
                gate(
                    approval,
                    &self.policy,
                    remembered,
                    tool_name,
                    capability,
                    &normalized,
                )
            }
            None => gate(
                approval,
                &self.policy,
                remembered,
                tool_name,
                capability,
                args,
            ),
        }
    }

    /// `args` with its `path` in canonical form (relative to the
    /// workspace root), for a path-taking tool whose path resolves.
    fn canonical_args(
        &self,
        tool_name: &str,
        args: &Value,
        workspace: &std::path::Path,
    ) -> Option<Value> {
        let path = args.get("path").and_then(Value::as_str)?;
        if tool_name == "exec_command" {
            return None;
        }
        let rel = super::paths::canonical_workspace(workspace)
            .and_then(|root| {
                super::paths::resolve(workspace, path, false)
                    .map(|abs| super::paths::relative(&root, &abs))
            })
            .ok()?;
        let mut normalized = args.clone();
        if let Value::Object(m) = &mut normalized {
            m.insert("path".into(), Value::String(rel));
        }
        Some(normalized)
    }

    fn lookup(&self, name: &str) -> Result<SharedTool, ToolError> {
        self.get(name).ok_or_else(|| ToolError::UnknownTool {
            name: name.to_string(),
            available: self.names().join(", "),
        })
    }
}
