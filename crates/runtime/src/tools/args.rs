//! Typed reads of already-validated argument objects.

use serde_json::Value;

use super::ToolError;

/// A required string argument.
pub fn required_str<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::Schema(format!("`{key}`: required string field is missing")))
}

/// An optional string argument.
pub fn opt_str<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// An optional non-negative integer argument (a float that stands for an
/// integer exactly counts, as the schema allows it; `1e300` does not).
pub fn opt_u64(args: &Value, key: &str) -> Option<u64> {
    let value = args.get(key)?;
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| *f >= 0.0 && super::schema::exact_integer(*f))
            .map(|f| f as u64)
    })
}

/// An optional boolean argument, `default` when absent.
pub fn bool_or(args: &Value, key: &str, default: bool) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(default)
}
