//! How a round trip is shown, the same in every table: `muster query`, `muster scan`, the
//! browser's terminal and its page.

/// A round trip in µs as the ping column shows it, in ms: to the tenth below 10 ms, whole
/// above, rounded to the nearest (as `muster query` rounds its own figure), so that a short
/// loopback or LAN round trip does not read as 0 or 1 and a long one is not off by nearly a
/// whole millisecond.
pub(crate) fn ping_ms(us: u32) -> f64 {
    match tenths(us) {
        Some(t) => f64::from(t) / 10.0,
        None => f64::from(whole_ms(us)),
    }
}

/// [`ping_ms`] as text: `4.2`, `9.9`, `10`, `21`.
pub(crate) fn ping_text(us: u32) -> String {
    match tenths(us) {
        Some(t) => format!("{}.{}", t / 10, t % 10),
        None => whole_ms(us).to_string(),
    }
}

/// Tenths of a millisecond, rounded, when that is below 10 ms.
fn tenths(us: u32) -> Option<u32> {
    Some(us.saturating_add(50) / 100).filter(|t| *t < 100)
}

fn whole_ms(us: u32) -> u32 {
    us.saturating_add(500) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_shows_tenths_below_10_ms_and_rounds() {
        let cases = [
            (0, "0.0", 0.0),
            (349, "0.3", 0.3),
            (350, "0.4", 0.4),
            (4_249, "4.2", 4.2),
            (9_949, "9.9", 9.9),
            // 9.95 ms rounds to 10.0: shown whole.
            (9_950, "10", 10.0),
            (21_499, "21", 21.0),
            // Rounded, not truncated: 21.7 ms reads 22 (truncating gave 21).
            (21_700, "22", 22.0),
            (u32::MAX, "4294967", 4_294_967.0),
        ];
        for (us, text, ms) in cases {
            assert_eq!(ping_text(us), text, "{us} µs");
            assert!((ping_ms(us) - ms).abs() < 1e-9, "{us} µs: {}", ping_ms(us));
        }
    }
}
