//! Why a query produced no result, as the engine reports it.

use std::io;

use muster_proto::query::QueryError;

/// A query's failure: either the machine's own verdict or an I/O problem the engine met.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// The query machine gave up (timeout, undecodable replies, rejection).
    #[error(transparent)]
    Query(#[from] QueryError),
    /// The datagram could not be sent (no IPv6, unreachable network, …).
    #[error("send failed: {}", kind_text(*.0))]
    Send(io::ErrorKind),
    /// The server's host answered with ICMP port unreachable: nothing listens there.
    #[error("connection refused (ICMP port unreachable)")]
    Refused,
    /// The overall deadline passed before the query's request was sent (a rate budget that
    /// the deadline leaves too little time for).
    #[error("deadline passed before the request was sent")]
    Unsent,
    /// The host name did not resolve.
    #[error("cannot resolve host name")]
    Resolve,
    /// A TCP connection could not be opened.
    #[error("cannot connect: {}", kind_text(*.0))]
    Connect(io::ErrorKind),
    /// Reading or writing an open connection failed.
    #[error("connection failed: {}", kind_text(*.0))]
    Io(io::ErrorKind),
    /// An HTTP request failed (0: no status, the request itself failed).
    #[error("http status {0}")]
    Http(u16),
    /// A local file could not be read.
    #[error("cannot read: {}", kind_text(*.0))]
    Read(io::ErrorKind),
    /// The answer exceeded Muster's size limit.
    #[error("answer too large")]
    TooLarge,
}

fn kind_text(kind: io::ErrorKind) -> String {
    io::Error::from(kind).to_string().to_lowercase()
}
