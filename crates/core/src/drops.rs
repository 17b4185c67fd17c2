//! Why an input was dropped: one enum for every face, counted per reason in `/metrics`.
//!
//! A reason is a variant, never a string from the wire, so the number of metric series is
//! fixed by the code. The names are the `reason` label values of `muster_drops_total`.

macro_rules! drops {
    ($($(#[doc = $doc:literal])* $v:ident = $name:literal,)*) => {
        /// Why an input (datagram, request, connection) was dropped or refused.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum DropReason {
            $($(#[doc = $doc])* $v,)*
        }

        impl DropReason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$v,)*];

            /// The `reason` label value.
            #[must_use]
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$v => $name,)*
                }
            }
        }
    };
}

drops! {
    /// Undecodable, empty, or not what the face speaks.
    Malformed = "malformed",
    /// Larger than the face's named limit.
    TooLarge = "too_large",
    /// A registration from an IPv6 source on a face whose lists are IPv4 only.
    Ipv6Heartbeat = "ipv6_heartbeat",
    /// Port 0 (or source port 1 for GameAgent: game port 0).
    PortZero = "port_zero",
    /// The face's global egress byte budget was spent.
    EgressBudget = "egress_budget",
    /// The source's byte budget for list replies was spent.
    SourceBudget = "source_budget",
    /// A per-source token bucket refused it.
    RateLimited = "rate_limited",
    /// The source already has the most records it may have.
    SourceCap = "source_cap",
    /// The registry is full.
    RecordCap = "record_cap",
    /// A game name the registry refuses.
    BadGame = "bad_game",
    /// An address the registry refuses.
    BadAddress = "bad_address",
    /// A DDNet server with too many addresses.
    StreamCap = "stream_cap",
    /// A GameAgent echo that matches no challenge.
    BadEcho = "bad_echo",
    /// A GameAgent answer from a port other than the one challenged.
    PortHop = "port_hop",
    /// A GameAgent `u` from a server that is not listed.
    UnexpectedStateChange = "unexpected_state_change",
    /// A GameSpy gamename without a key in the game table.
    UnknownGame = "unknown_game",
    /// A `\validate\` without a challenge waiting for it.
    UnexpectedValidate = "unexpected_validate",
    /// A proof exchange was forgotten to make room (the face's bounded pending table).
    PendingEvicted = "pending_evicted",
    /// A Serious Sam `\status\` answer naming another game.
    StatusGamename = "status_gamename",
    /// A `\status\` check could not start (the table of checks is full of recent ones).
    StatusBusy = "status_busy",
    /// An own-face query this face does not answer.
    UnknownQuery = "unknown_query",
    /// GameSpy `\echo\` (never answered).
    Echo = "echo",
    /// A list request with enctype 2 (not served).
    Enctype2List = "enctype2_list",
    /// A list request naming an unsupported enctype.
    UnsupportedEnctype = "unsupported_enctype",
    /// A list client's `\validate\` was wrong (counted; refused only when configured).
    ClientValidate = "client_validate",
    /// A list connection ended before its request was complete.
    ListEof = "list_eof",
    /// A `\sync\` request from a peer that may not sync.
    SyncUnsupported = "sync_unsupported",
    /// A message for a server this face does not know.
    UnknownServer = "unknown_server",
    /// A Teeworlds 0.7 message without this master's token.
    BadToken = "bad_token",
    /// A Teeworlds message of the wrong version for the socket.
    WrongVersion = "wrong_version",
    /// A Teeworlds message the face does not serve.
    Unsupported = "unsupported",
    /// An unexpected message for the face's state.
    Unexpected = "unexpected",
    /// Too many firewall checks at once.
    CheckCap = "check_cap",
    /// No socket of the peer's address family to send a DDNet challenge from.
    NoChallengeSocket = "no_challenge_socket",
    /// Input arrived faster than the face could take it.
    Overload = "overload",
    /// A record expired.
    Expired = "expired",
    /// A listed server stopped answering polls and was de-listed.
    Unreachable = "unreachable",
    /// A poll result came back for a record that is gone.
    PollLost = "poll_lost",
    /// A poll could not be sent before its round ended.
    PollNotSent = "poll_not_sent",
    /// The poller's queue of changed servers was full.
    ChangedQueueFull = "changed_queue_full",
    /// The store could not take a change.
    StoreError = "store_error",
    /// A connection over the total connection cap.
    TcpConnCap = "tcp_conn_cap",
    /// A connection over the per-source connection cap.
    TcpSourceCap = "tcp_source_cap",
    /// A connection that did not finish in its total time.
    TcpTotalTimeout = "tcp_total_timeout",
    /// A connection idle for too long.
    TcpIdleTimeout = "tcp_idle_timeout",
    /// An HTTP client that did not send its request headers in time.
    HttpHeaderTimeout = "http_header_timeout",
    /// Management: a frame that is not a command.
    MgmtNotACommand = "mgmt_not_a_command",
    /// Management: a command with invalid fields.
    MgmtInvalid = "mgmt_invalid",
    /// Management: a broken frame (the connection is closed).
    MgmtFraming = "mgmt_framing",
    /// Management: an unregistered connection idle for too long.
    MgmtIdleTimeout = "mgmt_idle_timeout",
    /// Management: a stats update before a registration.
    MgmtNotRegistered = "mgmt_not_registered",
    /// Management: a name the registry cannot keep.
    MgmtNameTooLong = "mgmt_name_too_long",
    /// Management: a client that does not read its answers.
    MgmtOutputOverflow = "mgmt_output_overflow",
    /// Management: an answer cut to fit the frame limit.
    MgmtAnswerTruncated = "mgmt_answer_truncated",
    /// HTTP: an event stream refused by the subscriber caps.
    EventStreamCap = "event_stream_cap",
    /// HTTP: an event stream dropped for falling behind.
    EventStreamLagged = "event_stream_lagged",
    /// A connection over the per IPv6 /56 or /48 connection cap.
    TcpPrefixCap = "tcp_prefix_cap",
    /// A connection refused from the reserve kept for sources holding few connections.
    TcpReserve = "tcp_reserve",
    /// A registration not acknowledged because the store did not confirm it in time (DDNet:
    /// answered 503; management: the connection's next answers wait for it).
    NotStored = "not_stored",
    /// A player-count history sample dropped because the history store refused its batch (a
    /// full disk); counted per sample.
    HistoryNotStored = "history_not_stored",
}

impl DropReason {
    /// The reason called `name`, if there is one.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|d| d.name() == name)
    }

    /// Position in [`DropReason::ALL`].
    #[must_use]
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl From<crate::registry::Reject> for DropReason {
    fn from(r: crate::registry::Reject) -> Self {
        use crate::registry::Reject;
        match r {
            Reject::SourceCap => Self::SourceCap,
            Reject::RecordCap => Self::RecordCap,
            Reject::BadGame => Self::BadGame,
            Reject::BadAddress => Self::BadAddress,
            Reject::StreamCap => Self::StreamCap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for (i, d) in DropReason::ALL.iter().enumerate() {
            assert!(seen.insert(d.name()), "{} twice", d.name());
            assert_eq!(DropReason::from_name(d.name()), Some(*d));
            assert_eq!(d.index(), i);
            assert!(
                d.name()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit())
            );
        }
    }
}
