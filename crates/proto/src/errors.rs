//! Errors as one log line.

/// `e` and its sources on one line, for logs and messages (`a: b: c`). A source whose text
/// the line already holds (an error that prints its cause itself) is not repeated.
#[must_use]
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn sources_follow_on_one_line() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(error_chain(&e), "outer: inner");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Says(#[source] std::io::Error);

    #[test]
    fn a_cause_already_printed_is_not_repeated() {
        let e = Says(std::io::Error::other("inner"));
        assert_eq!(error_chain(&e), "outer: inner");
    }
}
