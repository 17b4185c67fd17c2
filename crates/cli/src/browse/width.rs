//! Cells cut and padded by display width: a CJK character takes two columns, a combining
//! mark none, so a table of names from every game's players stays aligned.

use unicode_width::{UnicodeWidthChar as _, UnicodeWidthStr as _};

/// The columns `s` takes on a terminal.
pub(crate) fn width(s: &str) -> usize {
    s.width()
}

/// `s` without control characters (a server name with a tab or an escape would move the
/// cursor).
pub(crate) fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

/// `s` cut to at most `columns` columns, with `…` where it was cut; never splits a wide
/// character (a cut in its middle leaves the column blank).
pub(crate) fn truncate(s: &str, columns: usize) -> String {
    if width(s) <= columns {
        return s.to_owned();
    }
    if columns == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > columns - 1 {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

/// `s` cut to `columns` and padded with spaces to exactly `columns` columns.
pub(crate) fn fit(s: &str, columns: usize) -> String {
    let mut out = truncate(s, columns);
    let pad = columns.saturating_sub(width(&out));
    out.extend(std::iter::repeat_n(' ', pad));
    out
}

/// `s` cut to `columns` and padded on the left to exactly `columns` columns.
pub(crate) fn fit_right(s: &str, columns: usize) -> String {
    let cut = truncate(s, columns);
    let pad = columns.saturating_sub(width(&cut));
    let mut out: String = std::iter::repeat_n(' ', pad).collect();
    out.push_str(&cut);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_characters_count_twice_and_are_never_split() {
        assert_eq!(width("日本"), 4);
        assert_eq!(fit("日本語サーバー", 7), "日本語…");
        assert_eq!(width(&fit("日本語サーバー", 7)), 7);
        // Six columns: two characters and the mark take five, the sixth is padding.
        assert_eq!(fit("日本語サーバー", 6), "日本… ");
        assert_eq!(width(&fit("日本語サーバー", 6)), 6);
    }

    #[test]
    fn ascii_fits_exactly_and_pads() {
        assert_eq!(fit("abc", 5), "abc  ");
        assert_eq!(fit("abcdef", 5), "abcd…");
        assert_eq!(fit_right("42", 4), "  42");
        assert_eq!(fit("abc", 0), "");
    }

    #[test]
    fn combining_marks_take_no_column() {
        let s = "e\u{301}e\u{301}";
        assert_eq!(width(s), 2);
        assert_eq!(fit(s, 3), format!("{s} "));
    }

    #[test]
    fn control_characters_are_removed() {
        assert_eq!(printable("a\tb\x1b[2Jc"), "ab[2Jc");
    }
}
