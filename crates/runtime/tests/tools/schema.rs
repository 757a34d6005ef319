//! The small JSON Schema validator.

use serde_json::{Value, json};
use troupe_runtime::tools::schema::validate;

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1},
            "n": {"type": "integer", "minimum": 1, "maximum": 10},
            "ratio": {"type": "number"},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "flags": {"type": "array", "items": {"type": "boolean"}},
            "nested": {
                "type": "object",
                "properties": {"x": {"type": "integer"}},
                "additionalProperties": false
            }
        },
        "required": ["path"],
        "additionalProperties": false
    })
}

#[test]
fn accepts_a_valid_object() {
    let args = json!({
        "path": "x", "n": 2, "ratio": 0.5, "mode": "a", "flags": [true], "nested": {"x": 1}
    });
    assert_eq!(validate(&schema(), &args), Ok(()));
    assert_eq!(
        validate(&schema(), &json!({"path": "x", "n": 3.0})),
        Ok(()),
        "3.0 is an integer"
    );
}

#[test]
fn errors_name_the_offending_field() {
    let cases = [
        (json!({}), "`path`: required"),
        (json!({"path": 3}), "`path`: expected string, got integer"),
        (
            json!({"path": "x", "n": 0}),
            "`n`: 0 is less than the minimum",
        ),
        (
            json!({"path": "x", "n": 11}),
            "`n`: 11 is more than the maximum",
        ),
        (
            json!({"path": "x", "n": 1.5}),
            "`n`: expected integer, got number",
        ),
        // Regression: 1e300 passed as an integer and saturated to u64::MAX.
        (
            json!({"path": "x", "nested": {"x": 1e300}}),
            "`nested.x`: expected integer, got number",
        ),
        (
            json!({"path": "x", "ratio": "1"}),
            "`ratio`: expected number, got string",
        ),
        (
            json!({"path": "x", "mode": "c"}),
            "`mode`: \"c\" is not one of",
        ),
        (
            json!({"path": "x", "zz": 1}),
            "`zz`: unknown field; allowed fields:",
        ),
        (
            json!({"path": "x", "flags": [true, 1]}),
            "`flags[1]`: expected boolean",
        ),
        (
            json!({"path": "x", "nested": {"y": 1}}),
            "`nested.y`: unknown field",
        ),
        (
            json!({"path": "x", "nested": {"x": "1"}}),
            "`nested.x`: expected integer",
        ),
        (json!({"path": ""}), "`path`: must be at least 1"),
        (json!([1]), "arguments: expected object, got array"),
        (json!(null), "arguments: expected object, got null"),
    ];
    for (args, expected) in cases {
        let err = validate(&schema(), &args).unwrap_err();
        assert!(
            err.starts_with(expected),
            "{args}: got {err:?}, want {expected:?}"
        );
    }
}

#[test]
fn type_lists_and_unknown_keywords() {
    let s = json!({"type": ["string", "null"], "description": "ignored", "format": "ignored"});
    assert_eq!(validate(&s, &json!(null)), Ok(()));
    assert_eq!(validate(&s, &json!("a")), Ok(()));
    let err = validate(&s, &json!(1)).unwrap_err();
    assert!(err.contains("expected string or null"), "{err}");
}
