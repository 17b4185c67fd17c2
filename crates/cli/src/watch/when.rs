//! `--when EXPR`: which events are reported. An expression is a condition on one event:
//! its kind (`server_down`, `friend_online`, any kind `--help` lists) or a threshold on the
//! server's counts at that event (`players>=8`, `players<2`, `max_players==16`,
//! `free_slots>0`), combined with `and`, `or`, `not` and parentheses (`and` binds tighter
//! than `or`). `&&`, `||` and `!` are the same words.
//!
//! A threshold holds for every event of a server whose count matches it at that event (a
//! server with no count known, a `server_down`, never matches a threshold).

use std::fmt;

use super::machine::{Event, EventKind};

/// Longest expression, in characters.
pub(crate) const EXPR_MAX: usize = 1024;
/// Deepest nesting of parentheses and `not`s.
pub(crate) const DEPTH_MAX: usize = 32;

/// A count an event carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    Players,
    MaxPlayers,
    FreeSlots,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

/// A parsed `--when` expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum When {
    Kind(EventKind),
    Compare(Count, Op, u64),
    Not(Box<Self>),
    And(Box<Self>, Box<Self>),
    Or(Box<Self>, Box<Self>),
}

/// What is wrong with an expression, and where (a column, from 1, in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at column {}: {}", self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Number(u64),
    Op(Op),
    And,
    Or,
    Not,
    Open,
    Close,
    End,
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Word(w) => format!("{w:?}"),
        Tok::Number(n) => format!("the number {n}"),
        Tok::Op(_) => "a comparison".into(),
        Tok::And => "`and`".into(),
        Tok::Or => "`or`".into(),
        Tok::Not => "`not`".into(),
        Tok::Open => "`(`".into(),
        Tok::Close => "`)`".into(),
        Tok::End => "the end".into(),
    }
}

/// The tokens of `s`, each with its column.
fn lex(s: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let err = |column: usize, message: String| ParseError { column, message };
    while let Some(&c) = chars.get(i) {
        let col = i + 1;
        let next = chars.get(i + 1).copied();
        let (tok, len) = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '(' => (Tok::Open, 1),
            ')' => (Tok::Close, 1),
            '>' if next == Some('=') => (Tok::Op(Op::Ge), 2),
            '<' if next == Some('=') => (Tok::Op(Op::Le), 2),
            '=' if next == Some('=') => (Tok::Op(Op::Eq), 2),
            '!' if next == Some('=') => (Tok::Op(Op::Ne), 2),
            '>' => (Tok::Op(Op::Gt), 1),
            '<' => (Tok::Op(Op::Lt), 1),
            '=' => (Tok::Op(Op::Eq), 1),
            '!' => (Tok::Not, 1),
            '&' if next == Some('&') => (Tok::And, 2),
            '|' if next == Some('|') => (Tok::Or, 2),
            c if c.is_ascii_digit() => {
                let len = chars
                    .get(i..)
                    .unwrap_or_default()
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count();
                let digits: String = chars.get(i..i + len).unwrap_or_default().iter().collect();
                let n = digits
                    .parse::<u64>()
                    .map_err(|_| err(col, format!("{digits} is too large a number")))?;
                (Tok::Number(n), len)
            }
            c if c.is_alphabetic() || c == '_' => {
                let len = chars
                    .get(i..)
                    .unwrap_or_default()
                    .iter()
                    .take_while(|c| c.is_alphanumeric() || **c == '_')
                    .count();
                let word: String = chars
                    .get(i..i + len)
                    .unwrap_or_default()
                    .iter()
                    .collect::<String>()
                    .to_lowercase();
                let tok = match word.as_str() {
                    "and" => Tok::And,
                    "or" => Tok::Or,
                    "not" => Tok::Not,
                    _ => Tok::Word(word),
                };
                (tok, len)
            }
            other => return Err(err(col, format!("unexpected {other:?}"))),
        };
        out.push((tok, col));
        i += len;
    }
    out.push((Tok::End, chars.len() + 1));
    Ok(out)
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> &(Tok, usize) {
        // `lex` ends every list with `End`, which is never consumed.
        self.toks
            .get(self.at)
            .or_else(|| self.toks.last())
            .unwrap_or(&(Tok::End, 1))
    }

    fn bump(&mut self) -> (Tok, usize) {
        let t = self.peek().clone();
        if t.0 != Tok::End {
            self.at += 1;
        }
        t
    }

    fn or(&mut self) -> Result<When, ParseError> {
        let mut left = self.and()?;
        while self.peek().0 == Tok::Or {
            self.bump();
            left = When::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<When, ParseError> {
        let mut left = self.unary()?;
        while self.peek().0 == Tok::And {
            self.bump();
            left = When::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<When, ParseError> {
        let (tok, col) = self.bump();
        let deeper = |p: &mut Self| {
            p.depth += 1;
            if p.depth > DEPTH_MAX {
                return Err(ParseError {
                    column: col,
                    message: format!("nested deeper than {DEPTH_MAX}"),
                });
            }
            Ok(())
        };
        match tok {
            Tok::Not => {
                deeper(self)?;
                let inner = self.unary()?;
                self.depth -= 1;
                Ok(When::Not(Box::new(inner)))
            }
            Tok::Open => {
                deeper(self)?;
                let inner = self.or()?;
                self.depth -= 1;
                match self.bump() {
                    (Tok::Close, _) => Ok(inner),
                    (t, c) => Err(ParseError {
                        column: c,
                        message: format!(
                            "expected `)` for the `(` at column {col}, found {}",
                            describe(&t)
                        ),
                    }),
                }
            }
            Tok::Word(w) => self.atom(&w, col),
            t => Err(ParseError {
                column: col,
                message: format!(
                    "expected an event kind, players, max_players, free_slots, `not` or `(`, found {}",
                    describe(&t)
                ),
            }),
        }
    }

    fn atom(&mut self, word: &str, col: usize) -> Result<When, ParseError> {
        let count = match word {
            "players" => Some(Count::Players),
            "max_players" | "slots" => Some(Count::MaxPlayers),
            "free_slots" => Some(Count::FreeSlots),
            _ => None,
        };
        if let Some(count) = count {
            let op = match self.bump() {
                (Tok::Op(op), _) => op,
                (t, c) => {
                    return Err(ParseError {
                        column: c,
                        message: format!(
                            "expected a comparison (>=, >, <=, <, ==, !=) after {word}, found {}",
                            describe(&t)
                        ),
                    });
                }
            };
            return match self.bump() {
                (Tok::Number(n), _) => Ok(When::Compare(count, op, n)),
                (t, c) => Err(ParseError {
                    column: c,
                    message: format!("expected a number, found {}", describe(&t)),
                }),
            };
        }
        match kind_named(word) {
            Some(kind) => Ok(When::Kind(kind)),
            None => Err(ParseError {
                column: col,
                message: format!(
                    "unknown word {word:?}: expected an event kind ({}), players, max_players or free_slots",
                    KINDS
                        .iter()
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }
}

const KINDS: [EventKind; 10] = [
    EventKind::ServerUp,
    EventKind::ServerDown,
    EventKind::PlayerJoined,
    EventKind::PlayerLeft,
    EventKind::MapChanged,
    EventKind::NameChanged,
    EventKind::ServerFull,
    EventKind::SlotFree,
    EventKind::FriendOnline,
    EventKind::FriendOffline,
];

fn kind_named(word: &str) -> Option<EventKind> {
    KINDS.into_iter().find(|k| k.name() == word)
}

impl When {
    /// Parse one `--when` expression.
    pub(crate) fn parse(s: &str) -> Result<Self, ParseError> {
        if s.chars().count() > EXPR_MAX {
            return Err(ParseError {
                column: EXPR_MAX + 1,
                message: format!("longer than {EXPR_MAX} characters"),
            });
        }
        let mut p = Parser {
            toks: lex(s)?,
            at: 0,
            depth: 0,
        };
        let w = p.or()?;
        match p.bump() {
            (Tok::End, _) => Ok(w),
            (t, c) => Err(ParseError {
                column: c,
                message: format!("expected `and`, `or` or the end, found {}", describe(&t)),
            }),
        }
    }

    /// Whether `e` passes.
    pub(crate) fn matches(&self, e: &Event) -> bool {
        match self {
            Self::Kind(k) => e.kind == *k,
            Self::Compare(count, op, n) => {
                let value = match count {
                    Count::Players => e.players.map(u64::from),
                    Count::MaxPlayers => e.max_players.map(u64::from),
                    Count::FreeSlots => e
                        .max_players
                        .zip(e.players)
                        .map(|(m, p)| u64::from(m.saturating_sub(p))),
                };
                // A down server has no players, whatever it had before.
                let value = value.filter(|_| e.kind != EventKind::ServerDown);
                value.is_some_and(|v| match op {
                    Op::Lt => v < *n,
                    Op::Le => v <= *n,
                    Op::Gt => v > *n,
                    Op::Ge => v >= *n,
                    Op::Eq => v == *n,
                    Op::Ne => v != *n,
                })
            }
            Self::Not(w) => !w.matches(e),
            Self::And(a, b) => a.matches(e) && b.matches(e),
            Self::Or(a, b) => a.matches(e) || b.matches(e),
        }
    }
}

/// `--when`'s value parser.
pub(crate) fn parse(s: &str) -> Result<When, String> {
    When::parse(s).map_err(|e| e.to_string())
}

/// Whether `e` passes any of `whens` (all pass when there are none).
pub(crate) fn any(whens: &[When], e: &Event) -> bool {
    whens.is_empty() || whens.iter().any(|w| w.matches(e))
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use proptest::prelude::*;

    use super::*;

    fn event(kind: EventKind, players: Option<u32>) -> Event {
        Event {
            kind,
            address: "a:1".into(),
            time: SystemTime::UNIX_EPOCH,
            name: None,
            map: None,
            players,
            max_players: Some(16),
            player: None,
            previous: None,
            error: None,
        }
    }

    fn yes(expr: &str, e: &Event) -> bool {
        When::parse(expr)
            .unwrap_or_else(|err| panic!("{expr}: {err}"))
            .matches(e)
    }

    #[test]
    fn thresholds_kinds_and_combinations() {
        let joined8 = event(EventKind::PlayerJoined, Some(8));
        let joined1 = event(EventKind::PlayerJoined, Some(1));
        let down = event(EventKind::ServerDown, Some(8));
        assert!(yes("players>=8", &joined8));
        assert!(!yes("players>=8", &joined1));
        assert!(yes("players<2", &joined1));
        assert!(yes("players > 7 and player_joined", &joined8));
        assert!(yes("players<=1", &joined1));
        assert!(yes("players==8", &joined8) && yes("players=8", &joined8));
        assert!(yes("players!=8", &joined1));
        assert!(yes("free_slots>=15", &joined1));
        assert!(yes("max_players==16", &joined1));
        assert!(yes("server_down", &down));
        assert!(!yes("players>=8", &down), "a down server has no players");
        assert!(yes("server_down or friend_online", &down));
        assert!(!yes("map_changed", &down));
        // `and` binds tighter than `or`.
        assert!(yes("server_down or players>=100 and player_joined", &down));
        assert!(!yes(
            "(server_down or players>=100) and player_joined",
            &down
        ));
        assert!(yes("not player_left", &down) && yes("!player_left", &down));
        assert!(yes("SERVER_DOWN || map_changed && players<1", &down));
        assert!(!yes("players>=8", &event(EventKind::PlayerJoined, None)));
    }

    #[test]
    fn several_whens_are_alternatives() {
        let ws = [
            When::parse("server_down").unwrap(),
            When::parse("players>=8").unwrap(),
        ];
        assert!(super::any(&ws, &event(EventKind::ServerDown, None)));
        assert!(super::any(&ws, &event(EventKind::PlayerJoined, Some(9))));
        assert!(!super::any(&ws, &event(EventKind::PlayerJoined, Some(2))));
        assert!(super::any(&[], &event(EventKind::PlayerJoined, Some(2))));
    }

    #[test]
    fn errors_name_the_column() {
        for (expr, column, needle) in [
            ("players>=", 10, "expected a number"),
            ("players 8", 9, "expected a comparison"),
            ("server_dwn", 1, "unknown word \"server_dwn\""),
            ("server_down or", 15, "found the end"),
            ("(server_down", 13, "`)` for the `(` at column 1"),
            (
                "server_down map_changed",
                13,
                "expected `and`, `or` or the end",
            ),
            ("players >= 8 % 2", 14, "unexpected '%'"),
            ("players>=99999999999999999999999", 10, "too large"),
            ("", 1, "found the end"),
        ] {
            let e = When::parse(expr).unwrap_err();
            assert_eq!(e.column, column, "{expr}: {e}");
            assert!(e.message.contains(needle), "{expr}: {e}");
        }
        let deep = format!("{}server_up{}", "(".repeat(40), ")".repeat(40));
        assert!(
            When::parse(&deep)
                .unwrap_err()
                .message
                .contains("nested deeper")
        );
        assert!(When::parse(&"not ".repeat(40)).is_err());
        assert!(
            When::parse(&"x".repeat(EXPR_MAX + 1))
                .unwrap_err()
                .message
                .contains("longer")
        );
    }

    proptest! {
        #[test]
        fn the_parser_never_panics(s in "\\PC{0,64}") {
            let _ = When::parse(&s);
        }

        #[test]
        fn the_parser_never_panics_on_its_own_words(
            words in proptest::collection::vec(
                prop_oneof![
                    Just("players"), Just(">="), Just("<"), Just("=="), Just("8"), Just("("),
                    Just(")"), Just("and"), Just("or"), Just("not"), Just("server_down"),
                    Just("!"), Just("&&"), Just("||"), Just("free_slots"),
                ],
                0..40,
            )
        ) {
            let s = words.join(" ");
            if let Ok(w) = When::parse(&s) {
                let _ = w.matches(&event(EventKind::PlayerJoined, Some(8)));
            }
        }
    }
}
