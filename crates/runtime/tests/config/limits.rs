//! `[tools] max_calls_per_step`, `max_argument_bytes`, `max_spool_bytes`:
//! defaults, overrides, and 0 refused.

use troupe_runtime::tools::ToolLimits;

use crate::common::{load, load_err, workspace};

#[test]
fn the_bounds_default_and_can_be_set() {
    let ws = workspace(None);
    let c = load(ws.path(), &[]).unwrap();
    assert_eq!(c.tool_limits(), ToolLimits::default());
    assert_eq!(c.tool_limits().max_calls_per_step, 64);
    assert_eq!(c.tool_limits().max_argument_bytes, 1024 * 1024);
    assert_eq!(c.exec_config().max_spool_bytes, 256 * 1024 * 1024);

    let ws = workspace(Some(
        "[tools]\nmax_calls_per_step = 2\nmax_argument_bytes = 100\nmax_spool_bytes = 5000\n",
    ));
    let c = load(ws.path(), &[]).unwrap();
    assert_eq!(
        c.tool_limits(),
        ToolLimits {
            max_calls_per_step: 2,
            max_argument_bytes: 100
        }
    );
    assert_eq!(c.exec_config().max_spool_bytes, 5000);
}

#[test]
fn a_zero_bound_is_refused_naming_the_key() {
    for key in [
        "max_calls_per_step",
        "max_argument_bytes",
        "max_spool_bytes",
    ] {
        let text = load_err(&format!("[tools]\n{key} = 0\n")).to_string();
        assert!(text.contains(key), "{text}");
        assert!(text.contains("is 0"), "{text}");
        assert!(text.contains("at least 1"), "{text}");
    }
}
