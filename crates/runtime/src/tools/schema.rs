//! A small JSON Schema validator for the subset tool schemas use.
//!
//! Supported keywords: `type` (a name or a list of names: `object`,
//! `string`, `integer`, `number`, `boolean`, `array`, `null`), `properties`,
//! `required`, `additionalProperties` (`false` or a schema), `enum`,
//! `minimum`, `maximum`, `minLength`, `items`. Other keywords
//! (`description`, `default`, ...) are ignored. Errors name the offending
//! field by its JSON path (`start_line`, `items[2]`).
//!
//! Why not the `jsonschema` crate: its full draft support costs a large
//! dependency tree for six small object schemas; this subset keeps the
//! errors short and aimed at the model.

use serde_json::{Map, Value};

/// Checks `value` against `schema`; the error names the first offending
/// field and what was expected.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    check(schema, value, "")
}

fn check(schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return Ok(());
    };
    if let Some(types) = schema.get("type") {
        check_type(types, value, at)?;
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        let names: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return Err(format!(
            "{}: {value} is not one of [{}]",
            field(at),
            names.join(", ")
        ));
    }
    check_bounds(schema, value, at)?;
    match value {
        Value::Object(object) => check_object(schema, object, at),
        Value::Array(items) => match schema.get("items") {
            Some(item_schema) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, item)| check(item_schema, item, &format!("{at}[{i}]"))),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

fn check_type(types: &Value, value: &Value, at: &str) -> Result<(), String> {
    let names: Vec<&str> = match types {
        Value::String(name) => vec![name.as_str()],
        Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    if names.iter().any(|name| is_type(name, value)) {
        return Ok(());
    }
    Err(format!(
        "{}: expected {}, got {}",
        field(at),
        names.join(" or "),
        type_name(value)
    ))
}

fn check_bounds(schema: &Map<String, Value>, value: &Value, at: &str) -> Result<(), String> {
    if let Some(number) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && number < min
        {
            return Err(format!(
                "{}: {value} is less than the minimum {min}",
                field(at)
            ));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && number > max
        {
            return Err(format!(
                "{}: {value} is more than the maximum {max}",
                field(at)
            ));
        }
    }
    if let (Some(text), Some(min)) = (
        value.as_str(),
        schema.get("minLength").and_then(Value::as_u64),
    ) && (text.chars().count() as u64) < min
    {
        return Err(format!(
            "{}: must be at least {min} characters long",
            field(at)
        ));
    }
    Ok(())
}

fn check_object(
    schema: &Map<String, Value>,
    object: &Map<String, Value>,
    at: &str,
) -> Result<(), String> {
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !object.contains_key(name) {
                return Err(format!(
                    "{}: required field is missing",
                    field(&join(at, name))
                ));
            }
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let mut names: Vec<&String> = object.keys().collect();
    names.sort();
    for name in names {
        let path = join(at, name);
        let sub = &object[name.as_str()];
        match properties.and_then(|p| p.get(name.as_str())) {
            Some(prop_schema) => check(prop_schema, sub, &path)?,
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    let known: Vec<&String> =
                        properties.map(|p| p.keys().collect()).unwrap_or_default();
                    let known: Vec<&str> = known.iter().map(|k| k.as_str()).collect();
                    return Err(format!(
                        "{}: unknown field; allowed fields: {}",
                        field(&path),
                        known.join(", ")
                    ));
                }
                Some(extra @ Value::Object(_)) => check(extra, sub, &path)?,
                _ => {}
            },
        }
    }
    Ok(())
}

fn is_type(name: &str, value: &Value) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64() || value.as_f64().is_some_and(exact_integer),
        _ => true,
    }
}

/// A float that stands for an integer exactly: no fraction, and within
/// ±2^53, where every integer is representable (`1e300` is not an integer
/// argument: it would saturate to a huge count).
pub(crate) fn exact_integer(f: f64) -> bool {
    const MAX_EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    f.is_finite() && f.fract() == 0.0 && f.abs() <= MAX_EXACT
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn join(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    }
}

fn field(at: &str) -> String {
    if at.is_empty() {
        "arguments".to_string()
    } else {
        format!("`{at}`")
    }
}
