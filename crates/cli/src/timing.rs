//! The timing flags every querying command shares.

use std::time::Duration;

use muster_query::Options;

/// The shortest wait before a re-send, whatever the measured round trip.
const MIN_RETRANSMIT: Duration = Duration::from_millis(10);

pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 2s, 1m)"))
}

/// `--timeout`, `--retries`, `--deadline`, `--rate`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TimingArgs {
    /// Longest wait for one attempt before re-sending (e.g. 500ms, 2s): the upper bound. Once
    /// replies come, attempts wait the measured retransmission timeout instead (round trip
    /// plus four times its variation, from all servers until a server has answered itself),
    /// doubled after each re-send.
    #[arg(long, value_name = "DURATION", default_value = "1500ms", value_parser = duration)]
    pub timeout: Duration,
    /// How many times to re-send a request that got no answer (0 = send once, and wait the
    /// whole `--timeout` for it: the measured round trip only decides when to re-send).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub retries: u32,
    /// Give up on everything still running after this long (e.g. 10s); partial results are
    /// printed. Default: no overall deadline (each query still ends after its retries).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub deadline: Option<Duration>,
    /// Send at most this many packets per second in total (0 = unlimited). A request's
    /// timer starts when it is sent, so a slow rate makes a scan longer, never less complete.
    #[arg(long, value_name = "PPS", default_value_t = 1000)]
    pub rate: u32,
}

impl TimingArgs {
    /// Engine options for these flags.
    pub(crate) fn options(&self) -> Options {
        Options {
            attempt_timeout: self.timeout,
            // The measured round trip decides how soon to re-send (RTO = SRTT + 4·RTTVAR); the
            // floor only guards against re-sending faster than a scheduler tick.
            min_attempt_timeout: self.timeout.min(MIN_RETRANSMIT),
            retries: self.retries,
            deadline: self.deadline,
            rate: (self.rate != 0).then_some(self.rate),
            // Without re-sends there is nothing to time early: a late reply is still a reply.
            adaptive: self.retries > 0,
            ..Options::default()
        }
    }
}
