//! MCP elicitation: a server's `elicitation/create` (a form, or a URL to
//! open) handed to whoever answers for the session ([`Elicit`], the
//! session layer's approvals), and the answer sent back: accept (with the
//! form's content, the schema's defaults filled in: SEP-1034), decline or
//! cancel. Without an answerer every request is declined.

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, Implementation, ProtocolVersion,
    UrlElicitationCapability,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use troupe_protocol::ElicitationRequest;

/// One `elicitation/create` from a server.
#[derive(Debug, Clone)]
pub struct Elicitation {
    /// What it asks, as an approval request carries it.
    pub request: ElicitationRequest,
    /// The request's parameters as the server sent them (`message`,
    /// `requestedSchema` or `url`, `elicitationId`, `_meta`).
    pub params: Value,
    /// Cancelled when the server withdraws the request
    /// (`notifications/cancelled`) or the connection ends.
    pub withdrawn: CancellationToken,
}

/// The answer to one elicitation.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitationAnswer {
    /// Accepted; a form's content (the schema's defaults are filled in for
    /// the fields it leaves out).
    Accept(Option<Value>),
    /// Declined.
    Decline,
    /// Dismissed without a choice.
    Cancel,
}

/// Who answers a session's elicitations: an async callback the hub is
/// given ([`crate::McpHub::start_with`]).
pub type Elicit = Arc<dyn Fn(Elicitation) -> BoxFuture<'static, ElicitationAnswer> + Send + Sync>;

/// What troupe's client says of itself in the handshake: elicitation
/// (forms and URLs), protocol 2025-11-25.
pub(crate) fn client_info() -> ClientConfig {
    let mut caps = ClientCapabilities::default();
    caps.elicitation = Some(
        ElicitationCapability::new()
            .with_form(FormElicitationCapability::new())
            .with_url(UrlElicitationCapability::new()),
    );
    ClientConfig::new(
        caps,
        Implementation::new("troupe", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::V_2025_11_25)
}

/// `content` (an object; anything else counts as empty) with each
/// `properties.<name>.default` of `schema` set for the names it lacks
/// (SEP-1034).
pub fn with_defaults(schema: Option<&Value>, content: Option<Value>) -> Value {
    let mut out = match content {
        Some(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    if let Some(props) = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
    {
        for (name, prop) in props {
            if let Some(default) = prop.get("default")
                && !out.contains_key(name)
            {
                out.insert(name.clone(), default.clone());
            }
        }
    }
    Value::Object(out)
}

/// The request as troupe journals it, or `None` for a mode this client
/// does not know.
fn describe(server: &str, params: &ElicitRequestParams) -> Option<ElicitationRequest> {
    match params {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => Some(ElicitationRequest {
            server: server.to_string(),
            mode: "form".into(),
            message: message.clone(),
            requested_schema: serde_json::to_value(requested_schema).ok(),
            url: None,
        }),
        ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
            Some(ElicitationRequest {
                server: server.to_string(),
                mode: "url".into(),
                message: message.clone(),
                requested_schema: None,
                url: Some(url.clone()),
            })
        }
        _ => None,
    }
}

/// Answers one `elicitation/create` of `server` through `elicit` (none:
/// declined).
pub(crate) async fn answer(
    elicit: Option<Elicit>,
    server: &str,
    params: ElicitRequestParams,
    withdrawn: CancellationToken,
) -> ElicitResult {
    let (Some(elicit), Some(request)) = (elicit, describe(server, &params)) else {
        tracing::debug!(
            server,
            "elicitation declined: nobody answers, or an unknown mode"
        );
        return ElicitResult::new(ElicitationAction::Decline);
    };
    let form = request.mode == "form";
    let schema = request.requested_schema.clone();
    let elicitation = Elicitation {
        request,
        params: serde_json::to_value(&params).unwrap_or(Value::Null),
        withdrawn,
    };
    match elicit(elicitation).await {
        ElicitationAnswer::Accept(content) => {
            let result = ElicitResult::new(ElicitationAction::Accept);
            if form {
                result.with_content(with_defaults(schema.as_ref(), content))
            } else {
                result
            }
        }
        ElicitationAnswer::Decline => ElicitResult::new(ElicitationAction::Decline),
        ElicitationAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_what_the_answer_left_out() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "Ada"},
                "age": {"type": "integer", "default": 36},
                "email": {"type": "string"}
            }
        });
        assert_eq!(
            with_defaults(Some(&schema), Some(json!({"name": "Grace"}))),
            json!({"name": "Grace", "age": 36})
        );
        assert_eq!(
            with_defaults(Some(&schema), None),
            json!({"name": "Ada", "age": 36})
        );
        assert_eq!(with_defaults(None, Some(json!("x"))), json!({}));
    }

    #[test]
    fn the_client_declares_forms_and_urls_on_2025_11_25() {
        let info = serde_json::to_value(client_info()).unwrap();
        assert_eq!(info["protocolVersion"], "2025-11-25");
        assert!(
            info["capabilities"]["elicitation"]["form"].is_object(),
            "{info}"
        );
        assert!(
            info["capabilities"]["elicitation"]["url"].is_object(),
            "{info}"
        );
        assert_eq!(info["clientInfo"]["name"], "troupe");
    }
}
