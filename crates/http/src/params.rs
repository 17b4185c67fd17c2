//! The query parameters each route takes, and the check that refuses any other: a misspelt
//! filter is answered `400` naming it, never ignored.

use axum::extract::Query;

/// The query parameters of `GET /api/v1/servers`.
pub const LIST_PARAMS: &[&str] = &[
    "protocol",
    "game",
    "non_empty",
    "not_full",
    "password",
    "lobby",
    "region",
    "q",
    "sort",
    "order",
    "page",
    "per_page",
];
/// The query parameters of the routes of one server (`/api/v1/servers/{address}` and its
/// `/history`).
pub const SERVER_PARAMS: &[&str] = &["game"];

/// Most unknown parameter names one 400 names.
const MAX_NAMED_UNKNOWN: usize = 5;
/// Longest unknown parameter name quoted in a 400, in characters.
const MAX_NAMED_LEN: usize = 40;

/// `Err` with why, when `query` (a raw query string) has a parameter not in `known` or is not
/// a query string at all: a misspelt filter (`nonempty` for `non_empty`) is refused, naming
/// it, instead of being ignored.
pub fn check_params(query: Option<&str>, known: &[&str]) -> Result<(), String> {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(());
    };
    let uri: axum::http::Uri = format!("/?{query}")
        .parse()
        .map_err(|_| "malformed query string".to_owned())?;
    let Ok(Query(pairs)) = Query::<Vec<(String, String)>>::try_from_uri(&uri) else {
        return Err("malformed query string".to_owned());
    };
    let mut unknown: Vec<String> = Vec::new();
    for (k, _) in &pairs {
        if !known.contains(&k.as_str()) && !unknown.contains(k) {
            unknown.push(k.clone());
        }
    }
    if unknown.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = unknown
        .iter()
        .take(MAX_NAMED_UNKNOWN)
        .map(|k| {
            let short: String = k.chars().take(MAX_NAMED_LEN).collect();
            format!("{short:?}")
        })
        .collect();
    let more = unknown.len().saturating_sub(MAX_NAMED_UNKNOWN);
    Err(format!(
        "unknown query parameter{} {}{}; this route takes {}",
        if unknown.len() == 1 { "" } else { "s" },
        named.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        known.join(", ")
    ))
}
