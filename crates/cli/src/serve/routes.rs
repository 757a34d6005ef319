//! The routes of the API (method, path template) and matching a request
//! path against them; the body cap.

/// Largest request body accepted.
pub const MAX_BODY: usize = 1024 * 1024;

/// The routes (method, path), exactly those of docs/openapi.json (a test
/// checks it).
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/sessions"),
    ("get", "/v1/sessions"),
    ("get", "/v1/sessions/{id}"),
    ("get", "/v1/sessions/{id}/events"),
    ("post", "/v1/sessions/{id}/abort"),
    ("post", "/v1/sessions/{id}/steer"),
    ("post", "/v1/sessions/{id}/resume"),
    ("get", "/v1/sessions/{id}/agents/{*agent_id}"),
    ("get", "/v1/sessions/{id}/approvals"),
    ("post", "/v1/sessions/{id}/approvals/{approval_id}"),
];

/// The live page: public (it holds no data; its requests carry the token).
pub const PAGE: (&str, &str) = ("get", "/");

/// The methods the routes have for `path` (upper case, sorted).
pub(super) fn allowed_methods(path: &str) -> Vec<String> {
    let mut out: Vec<String> = ROUTES
        .iter()
        .chain([&PAGE])
        .filter(|(_, route)| route_matches(route, path))
        .map(|(m, _)| m.to_uppercase())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether `path` matches the route template `route` (`{x}` one
/// segment, `{*x}` the rest).
fn route_matches(route: &str, path: &str) -> bool {
    let mut want = route.trim_matches('/').split('/');
    let mut got = path.trim_matches('/').split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some(w), Some(g)) if w.starts_with("{*") => return !g.is_empty(),
            (Some(w), Some(g)) if w.starts_with('{') => {
                if g.is_empty() {
                    return false;
                }
            }
            (Some(w), Some(g)) if w == g => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{allowed_methods, route_matches};

    #[test]
    fn routes_match_their_templates() {
        assert!(route_matches("/v1/sessions", "/v1/sessions"));
        assert!(route_matches("/v1/sessions/{id}", "/v1/sessions/abc"));
        assert!(!route_matches(
            "/v1/sessions/{id}",
            "/v1/sessions/abc/steer"
        ));
        assert!(route_matches(
            "/v1/sessions/{id}/agents/{*agent_id}",
            "/v1/sessions/s/agents/session/root/a"
        ));
        assert!(route_matches("/", "/"));
        assert_eq!(allowed_methods("/v1/sessions"), vec!["GET", "POST"]);
        assert_eq!(allowed_methods("/v1/sessions/x/steer"), vec!["POST"]);
    }
}
