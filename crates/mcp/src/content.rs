//! A `tools/call` result as the text the model sees.

use rmcp::model::CallToolResult;
use serde_json::Value;
use troupe_runtime::tools::MAX_OUTPUT_BYTES;

/// The result's text: each text block as it is, other blocks (images,
/// audio, resources) as a short JSON description, the structured content
/// when there is no text; cut to [`MAX_OUTPUT_BYTES`]. Returns the text
/// and whether it was cut.
pub(crate) fn result_text(result: &CallToolResult) -> (String, bool) {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        let Ok(value) = serde_json::to_value(block) else {
            continue;
        };
        parts.push(block_text(&value));
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    cut(parts.join("\n"))
}

/// `text` cut to [`MAX_OUTPUT_BYTES`] with a note; whether it was cut.
pub(crate) fn cut(text: String) -> (String, bool) {
    if text.len() <= MAX_OUTPUT_BYTES {
        return (text, false);
    }
    let mut end = MAX_OUTPUT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (
        format!("{}\n[output cut at {end} bytes]", &text[..end]),
        true,
    )
}

fn block_text(value: &Value) -> String {
    let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => value
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        "image" | "audio" => {
            let mime = value.get("mimeType").and_then(Value::as_str).unwrap_or("?");
            let bytes = value
                .get("data")
                .and_then(Value::as_str)
                .map_or(0, str::len);
            format!("[{kind} {mime}, {bytes} bytes of base64 not shown]")
        }
        "resource" => match value.pointer("/resource/text").and_then(Value::as_str) {
            Some(text) => text.to_string(),
            None => format!(
                "[resource {}]",
                value
                    .pointer("/resource/uri")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
            ),
        },
        _ => value.to_string(),
    }
}
