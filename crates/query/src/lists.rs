//! Master lists: [`list_one`] and [`list_many`] fetch what a [`MasterSource`] lists, whatever
//! its protocol: the GameAgent, Teeworlds and Quake III (dpmaster) UDP masters (query machines run through
//! [`crate::spawn`] like any query), the GameSpy TCP list, the management server's
//! `msQueryGameServers`, and documents over HTTP or from a file (DDNet's `servers.json`, the
//! UT2003 text list).
//!
//! ```no_run
//! # async fn demo() -> Result<(), muster_query::Failure> {
//! use muster_query::lists::{MasterSource, list_one};
//! use muster_query::Options;
//!
//! let master = MasterSource::Teeworlds("127.0.0.1:8300".parse().unwrap());
//! for server in list_one(&master, &Options::default()).await? {
//!     println!("{}", server.address);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Every function here is bounded: a connect timeout, an overall deadline and a byte cap.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use muster_proto::gamespy_master::conversation::{ListClient, ListClientConfig};
use muster_proto::gamespy_master::packet::{Key, ListForm};
use muster_proto::mgmt::client::{ClientConnection, ClientEvent, encode_query};
use muster_proto::mgmt::messages::{AddressKind, ServerListAnswer};
use muster_proto::model::ServerList;
use muster_proto::query::{Event, QueryConfig, QueryError, QueryMachine};
use muster_proto::teeworlds_master::{MasterListQuery as TwListQuery, ServersJson, Token};
use muster_proto::ut2003_list::packet::ListFile;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;

use crate::clock::now;
use crate::engine::spawn;
use crate::error::Failure;
use crate::scheduler::{Completed, Job, Options};
use crate::target::HostPort;

/// Slack beyond the UDP attempts that a TCP or HTTP list gets when no deadline is set.
const LIST_SLACK: Duration = Duration::from_secs(2);

/// A document: an `http(s)` URL or a local file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Document {
    /// Fetched with GET (at most [`MAX_HTTP_BODY`] bytes).
    Url(String),
    /// Read from disk.
    File(PathBuf),
}

impl std::fmt::Display for Document {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Url(u) => f.write_str(u),
            Self::File(p) => write!(f, "{}", p.display()),
        }
    }
}

impl Document {
    /// A URL when `source` starts with `http://` or `https://`, otherwise a file path.
    #[must_use]
    pub fn parse(source: &str) -> Self {
        if source.starts_with("http://") || source.starts_with("https://") {
            Self::Url(source.to_owned())
        } else {
            Self::File(PathBuf::from(source))
        }
    }

    async fn load(&self, timeout: Duration) -> Result<Vec<u8>, Failure> {
        match self {
            Self::Url(url) => http_get(url, timeout).await,
            // A list file is read once and at most a few MiB: not worth a blocking-pool task.
            Self::File(path) => std::fs::read(path).map_err(|e| Failure::Read(e.kind())),
        }
    }
}

/// A master server (or list document) to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MasterSource {
    /// Serious Sam GameAgent master, UDP.
    GameAgent(SocketAddr),
    /// Teeworlds UDP master: 0.6 (`req2`) and 0.7 (token handshake) at once, lists merged.
    Teeworlds(SocketAddr),
    /// GameSpy master's TCP list for the game whose key is given.
    Gamespy(SocketAddr, Key),
    /// The management server's game-server list, TCP.
    Mgmt(SocketAddr),
    /// DDNet's HTTP master document (`servers.json`).
    Ddnet(Document),
    /// The UT2003 plain-text list.
    Ut2003Text(Document),
    /// A Quake III / DarkPlaces master (dpmaster): `getservers` without a game name,
    /// `getserversExt` with one (`quake3.md` §3).
    Quake3(SocketAddr, muster_proto::quake3::query::ListRequest),
    /// A Valve master query master (Valve's, or a Half-Life / Xash3D master), paged, with a
    /// filter string (`valve-master.md` §1–§3).
    Valve(SocketAddr, muster_proto::valve_master::query::ListAsk),
}

/// Where a listed game server is, as the master listed it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListedAddress {
    /// An IP address and port.
    Ip(SocketAddr),
    /// A host name and port, exactly as the game server registered it (management server,
    /// `management-server.md` §4.1). Nothing here resolves it: [`ListedAddress::resolve`]
    /// does, when the caller wants to connect.
    Host {
        /// The host name as registered (case and trailing dot kept).
        host: String,
        /// The port.
        port: u16,
    },
}

impl ListedAddress {
    /// The socket address, when the master listed an IP address.
    #[must_use]
    pub fn ip(&self) -> Option<SocketAddr> {
        match self {
            Self::Ip(a) => Some(*a),
            Self::Host { .. } => None,
        }
    }

    /// The socket address to connect to: the IP address itself, or the host name's first
    /// address (IPv4 first) through the system resolver.
    ///
    /// # Errors
    ///
    /// The resolver's error; [`std::io::ErrorKind::NotFound`] when the name has no address.
    pub async fn resolve(&self) -> std::io::Result<SocketAddr> {
        match self {
            Self::Ip(a) => Ok(*a),
            Self::Host { host, port } => {
                let hp = HostPort {
                    host: host.clone(),
                    port: Some(*port),
                };
                hp.resolve(*port).await?.first().copied().ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "host name has no address")
                })
            }
        }
    }
}

impl std::fmt::Display for ListedAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ip(a) => write!(f, "{a}"),
            Self::Host { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// A management-server game's lobby state (`management-server.md` §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lobby {
    /// Whether new players can join (`isLobbyOpen`).
    pub open: bool,
    /// The active gameplay mode (`gameplayMode`).
    pub mode: muster_proto::mgmt::messages::GameplayMode,
}

/// One server a master listed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MasterEntry {
    /// The game address (what a player connects to) when `address_is_game`; otherwise the
    /// query address the master listed (GameSpy lists).
    pub address: ListedAddress,
    /// Whether `address` is the game address.
    pub address_is_game: bool,
    /// The query address, when the list says it (GameSpy lists, the UT2003 text list).
    pub query_address: Option<SocketAddr>,
    /// The name, when the list carries one (DDNet, management server).
    pub name: Option<String>,
    /// Players, when the list carries them.
    pub num_players: Option<u32>,
    /// Slots, when the list carries them.
    pub max_players: Option<u32>,
    /// The lobby state (management server).
    pub lobby: Option<Lobby>,
    /// Where the server is, when the list says it: DDNet's location, a continent code with
    /// an optional ISO country code after a colon (`eu`, `eu:de`, `as:cn`), lowercase.
    pub location: Option<String>,
}

impl MasterEntry {
    fn listed(address: SocketAddr, query_address: Option<SocketAddr>) -> Self {
        Self {
            address: ListedAddress::Ip(address),
            address_is_game: true,
            query_address,
            name: None,
            num_players: None,
            max_players: None,
            lobby: None,
            location: None,
        }
    }
}

fn entries(list: &ServerList) -> Vec<MasterEntry> {
    list.servers
        .iter()
        .map(|s| MasterEntry::listed(s.address, s.query_address))
        .collect()
}

/// A GameSpy list's entries. The list gives query ports (the heartbeat's, `gamespy-master.md`
/// §2.3), and the game port is not always the conventional offset away (UT2003 servers may
/// answer GameSpy at + 1 or + 10): the query address is all it says, and the entries say so.
fn gamespy_entries(list: &ServerList) -> Vec<MasterEntry> {
    list.servers
        .iter()
        .map(|s| {
            let query = s.query_address.unwrap_or(s.address);
            let mut e = MasterEntry::listed(query, Some(query));
            e.address_is_game = false;
            e
        })
        .collect()
}

/// The time a TCP or HTTP list may take: the deadline, or every UDP attempt plus slack.
fn overall(options: &Options) -> Duration {
    options.deadline.unwrap_or_else(|| {
        options
            .attempt_timeout
            .saturating_mul(options.retries.saturating_add(1))
            .saturating_add(LIST_SLACK)
    })
}

/// The servers `source` lists, asked with `options` (UDP masters: the engine's timing; TCP and
/// HTTP: bounded by the deadline, or by every UDP attempt's time plus two seconds).
///
/// # Errors
///
/// [`Failure`] when the master did not answer, answered what cannot be decoded (a document
/// that is not a `servers.json` or a UT2003 list: [`QueryError::Decode`]), or a file could
/// not be read.
pub async fn list_one(
    source: &MasterSource,
    options: &Options,
) -> Result<Vec<MasterEntry>, Failure> {
    let within = overall(options);
    match source {
        MasterSource::GameAgent(addr) => {
            let addr = *addr;
            let list = udp_lists(
                vec![move |cfg| muster_proto::gameagent::query::MasterListQuery::new(addr, cfg)],
                options.clone(),
            )
            .await?;
            Ok(entries(&list))
        }
        MasterSource::Teeworlds(addr) => {
            let addr = *addr;
            let token = Token(rand::random());
            type Build = Box<dyn FnOnce(QueryConfig) -> TwListQuery + Send>;
            let builds: Vec<Build> = vec![
                Box::new(move |cfg| TwListQuery::new_06(addr, cfg, false)),
                Box::new(move |cfg| TwListQuery::new_07(addr, cfg, token)),
            ];
            let list = udp_lists(builds, options.clone()).await?;
            Ok(entries(&list))
        }
        MasterSource::Quake3(addr, request) => {
            let (addr, request) = (*addr, request.clone());
            let list = udp_lists(
                vec![move |cfg| muster_proto::quake3::query::ListQuery::new(addr, request, cfg)],
                options.clone(),
            )
            .await?;
            Ok(entries(&list))
        }
        MasterSource::Valve(addr, ask) => {
            let (addr, ask) = (*addr, ask.clone());
            let list = udp_lists(
                vec![move |cfg| muster_proto::valve_master::query::ListQuery::new(addr, ask, cfg)],
                options.clone(),
            )
            .await?;
            Ok(entries(&list))
        }
        MasterSource::Gamespy(addr, key) => {
            let mut config = ListClientConfig::new(key.clone(), ListForm::Cmp);
            config.timeout = within;
            Ok(gamespy_entries(&gamespy_list(*addr, config).await?))
        }
        MasterSource::Mgmt(addr) => {
            let answer = mgmt_list(*addr, within).await?;
            // Addresses stay as registered; a host name is resolved only by whoever connects.
            Ok(answer
                .servers()
                .iter()
                .map(|s| {
                    let port = s.server.port().get();
                    let registered = s.server.address();
                    let address = match registered.kind() {
                        AddressKind::Ipv4(ip) => {
                            ListedAddress::Ip(SocketAddr::new(ip.into(), port))
                        }
                        AddressKind::Ipv6(ip) => {
                            ListedAddress::Ip(SocketAddr::new(ip.into(), port))
                        }
                        AddressKind::Hostname => ListedAddress::Host {
                            host: registered.as_str().to_owned(),
                            port,
                        },
                    };
                    MasterEntry {
                        address,
                        address_is_game: true,
                        query_address: None,
                        name: Some(s.server.name().to_owned()),
                        num_players: Some(s.stats.current.get()),
                        max_players: Some(u32::from(s.stats.max.get())),
                        lobby: Some(Lobby {
                            open: s.stats.lobby_open,
                            mode: s.stats.mode,
                        }),
                        location: None,
                    }
                })
                .collect())
        }
        MasterSource::Ddnet(doc) => {
            let body = doc.load(within).await?;
            let doc =
                ServersJson::decode(&body).map_err(|e| Failure::Query(QueryError::Decode(e)))?;
            // One row per server (its first UDP address), with what the document says of it.
            let mut out: Vec<MasterEntry> = Vec::new();
            for entry in &doc.servers {
                let Some(address) = entry
                    .parsed_addresses()
                    .iter()
                    .find_map(muster_proto::teeworlds_master::ServerAddress::socket_addr)
                else {
                    continue;
                };
                if out.iter().any(|l| l.address == ListedAddress::Ip(address)) {
                    continue;
                }
                let info = entry.server_info().ok();
                let mut e = MasterEntry::listed(address, None);
                e.name = info.as_ref().map(|i| i.name.plain.clone());
                e.num_players = info.as_ref().map(|i| i.num_players);
                e.max_players = info.as_ref().map(|i| i.max_players);
                e.location = (entry.location.as_deref())
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && l.len() <= MAX_LOCATION_LEN)
                    .map(str::to_ascii_lowercase);
                out.push(e);
            }
            Ok(out)
        }
        MasterSource::Ut2003Text(doc) => {
            let body = doc.load(within).await?;
            let file =
                ListFile::decode(&body).map_err(|e| Failure::Query(QueryError::Decode(e)))?;
            if file.invalid > 0 {
                // Lines the format cannot hold are skipped, and said so.
                tracing::warn!("{doc}: {}", file.summary());
            }
            Ok(entries(&file.to_server_list()))
        }
    }
}

/// The longest location a list entry keeps (DDNet's are `eu:de`-like, a few bytes).
pub const MAX_LOCATION_LEN: usize = 16;

/// Where a paged Valve list stands after a page (what `--resume` keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValveProgress {
    /// Pages (reply datagrams) received in this run.
    pub pages: u32,
    /// The last address received so far: the seed the next page is asked with, and where a
    /// later run resumes. The run's start seed until a page brings an address.
    pub last: SocketAddr,
    /// Whether a page ended with the zero address: the list is complete.
    pub complete: bool,
}

/// Told every page of a resumable Valve list, as soon as the page is read: where the list
/// stands, and the page's servers (zero-port entries left out). It runs inside the engine's
/// task: keep it short (writing a small file is fine).
pub type OnValvePage = Box<dyn FnMut(&ValveProgress, &[SocketAddr]) + Send>;

/// A Valve master's list, paged like [`MasterSource::Valve`] (the master's pace, one page
/// every [`muster_proto::valve_master::query::PAGE_INTERVAL`]) but resumable: the first
/// request carries `from` instead of the zero seed (a resume point a previous run recorded),
/// `on_page` hears after every page where the list stands, and with `max_pages` the run stops
/// after that many pages (its list then partial, the progress saying where to go on).
///
/// # Errors
///
/// As [`list_one`]: [`Failure`] when no page came.
pub async fn valve_list_from(
    master: SocketAddr,
    ask: muster_proto::valve_master::query::ListAsk,
    from: SocketAddr,
    max_pages: Option<u32>,
    on_page: OnValvePage,
    options: &Options,
) -> Result<Vec<MasterEntry>, Failure> {
    let list = udp_lists(
        vec![move |cfg| ResumedValveList::new(master, ask, from, max_pages, on_page, cfg)],
        options.clone(),
    )
    .await?;
    Ok(entries(&list))
}

/// The entries of servers a Valve list's pages gave (what [`OnValvePage`] heard), for a run
/// that ended before [`valve_list_from`] returned.
#[must_use]
pub fn valve_entries(servers: &[SocketAddr]) -> Vec<MasterEntry> {
    servers
        .iter()
        .map(|a| MasterEntry::listed(*a, None))
        .collect()
}

/// The Valve list machine with a start seed, a page cap and a page hook around it. The inner
/// machine keeps the paging, pacing and retries; this one reads each page it is fed (to
/// report progress) and, until the first page, rewrites the seed of the requests it sends.
struct ResumedValveList {
    inner: muster_proto::valve_master::query::ListQuery,
    master: SocketAddr,
    ipv6: bool,
    with_key: bool,
    from: SocketAddr,
    max_pages: Option<u32>,
    progress: ValveProgress,
    stopped: bool,
    on_page: OnValvePage,
}

impl std::fmt::Debug for ResumedValveList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumedValveList")
            .field("inner", &self.inner)
            .field("from", &self.from)
            .field("max_pages", &self.max_pages)
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl ResumedValveList {
    fn new(
        master: SocketAddr,
        ask: muster_proto::valve_master::query::ListAsk,
        from: SocketAddr,
        max_pages: Option<u32>,
        on_page: OnValvePage,
        config: QueryConfig,
    ) -> Self {
        let with_key =
            muster_proto::valve_master::Filter::parse(&ask.filter).is_ok_and(|f| f.key.is_some());
        let ipv6 = ask.ipv6;
        Self {
            inner: muster_proto::valve_master::query::ListQuery::new(master, ask, config),
            master,
            ipv6,
            with_key,
            from,
            max_pages,
            progress: ValveProgress {
                pages: 0,
                last: from,
                complete: false,
            },
            stopped: false,
            on_page,
        }
    }
}

impl QueryMachine for ResumedValveList {
    type Output = ServerList;

    fn handle_datagram(&mut self, now: std::time::Instant, from: SocketAddr, datagram: &[u8]) {
        if self.stopped || from != self.master {
            return;
        }
        let page =
            muster_proto::valve_master::ListReply::decode(datagram, self.ipv6, self.with_key);
        self.inner.handle_datagram(now, from, datagram);
        let Ok(page) = page else {
            return;
        };
        self.progress.pages = self.progress.pages.saturating_add(1);
        if let Some(last) = page.servers.iter().rev().find(|a| a.port() != 0) {
            self.progress.last = *last;
        }
        self.progress.complete |= page.complete;
        let servers: Vec<SocketAddr> = page.servers.into_iter().filter(|a| a.port() != 0).collect();
        (self.on_page)(&self.progress, &servers);
        if !self.progress.complete && self.max_pages.is_some_and(|m| self.progress.pages >= m) {
            self.stopped = true;
            self.inner.abort(now);
        }
    }

    fn handle_timeout(&mut self, now: std::time::Instant) {
        self.inner.handle_timeout(now);
    }

    fn poll_transmit(
        &mut self,
        now: std::time::Instant,
        buf: &mut Vec<u8>,
    ) -> Option<muster_proto::query::Transmit> {
        let start = buf.len();
        let transmit = self.inner.poll_transmit(now, buf)?;
        // Until a page comes the inner machine asks from the zero seed; ask from `from`.
        if self.progress.pages == 0 && self.from != muster_proto::valve_master::packet::SEED {
            if let Ok(mut request) =
                muster_proto::valve_master::ListRequest::decode(buf.get(start..)?)
            {
                request.last = self.from;
                buf.truncate(start);
                buf.extend_from_slice(&request.encode());
            }
        }
        Some(transmit)
    }

    fn poll_timeout(&self) -> Option<std::time::Instant> {
        self.inner.poll_timeout()
    }

    fn poll_event(&mut self) -> Option<Event<ServerList>> {
        self.inner.poll_event()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.inner.set_attempt_timeout(timeout);
    }

    fn abort(&mut self, now: std::time::Instant) {
        self.inner.abort(now);
    }
}

/// Ask every master of `sources` at once; each result comes as soon as that master is done,
/// with its index in `sources`. The stream yields exactly one item per source, then ends.
/// Must be called within a tokio runtime; dropping the stream stops nothing already asked.
pub fn list_many(
    sources: Vec<MasterSource>,
    options: &Options,
) -> impl Stream<Item = (usize, Result<Vec<MasterEntry>, Failure>)> + Send + Unpin + use<> {
    let (tx, rx) = tokio::sync::mpsc::channel(sources.len().max(1));
    for (i, source) in sources.into_iter().enumerate() {
        let tx = tx.clone();
        let options = options.clone();
        tokio::spawn(async move {
            let result = list_one(&source, &options).await;
            let _ = tx.send((i, result)).await;
        });
    }
    ReceiverStream::new(rx)
}

/// UDP list machines of one master through the engine, their lists merged; the last failure
/// when none answered.
async fn udp_lists<M, F>(machines: Vec<F>, options: Options) -> Result<ServerList, Failure>
where
    M: QueryMachine<Output = ServerList> + Send + 'static,
    F: FnOnce(QueryConfig) -> M + Send + 'static,
{
    let jobs: Vec<_> = machines
        .into_iter()
        .enumerate()
        .map(|(tag, build)| Job { tag, build })
        .collect();
    let mut rx = spawn(jobs, options);
    let mut merged = ServerList::default();
    let mut error = None;
    let mut any_ok = false;
    while let Some(Completed { outcome, .. }) = rx.recv().await {
        match outcome {
            Ok(list) => {
                any_ok = true;
                for s in list.servers {
                    if !merged.servers.contains(&s) {
                        merged.servers.push(s);
                    }
                }
                if merged.partial.is_none() {
                    merged.partial = list.partial;
                }
            }
            Err(e) => error = Some(e),
        }
    }
    if any_ok {
        Ok(merged)
    } else {
        Err(error.unwrap_or(Failure::Query(QueryError::Timeout)))
    }
}

/// The most bytes an HTTP list document may have (DDNet's full `servers.json` is a few MiB).
pub const MAX_HTTP_BODY: usize = 32 << 20;
/// Read buffer of the TCP conversations.
const READ_CHUNK: usize = 16 << 10;

async fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, Failure> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(Failure::Connect(e.kind())),
        Err(_) => Err(Failure::Query(QueryError::Timeout)),
    }
}

/// The GameSpy master's TCP list (greeting, `\validate\`, `\list\`), as `config` asks for it.
/// The whole conversation is bounded by `config.timeout`.
pub async fn gamespy_list(
    addr: SocketAddr,
    config: ListClientConfig,
) -> Result<ServerList, Failure> {
    let deadline = tokio::time::Instant::now() + config.timeout;
    let mut client = ListClient::new(config, now());
    let mut stream = connect(addr, deadline - tokio::time::Instant::now()).await?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        while client.poll_write(&mut out) {
            stream
                .write_all(&out)
                .await
                .map_err(|e| Failure::Io(e.kind()))?;
            out.clear();
        }
        if let Some(event) = client.poll_event() {
            return match event {
                Event::Done(list) => Ok(list),
                Event::Failed(e) => Err(Failure::Query(e)),
            };
        }
        let wake = client.poll_timeout().map_or(deadline, |t| {
            tokio::time::Instant::from_std(t).min(deadline)
        });
        tokio::select! {
            r = stream.read(&mut buf) => match r {
                Ok(0) => client.handle_eof(now()),
                Ok(n) => client.handle_data(now(), buf.get(..n).unwrap_or_default()),
                Err(e) => return Err(Failure::Io(e.kind())),
            },
            () = tokio::time::sleep_until(wake) => {
                if tokio::time::Instant::now() >= deadline {
                    client.abort(now());
                } else {
                    client.handle_timeout(now());
                }
            }
        }
    }
}

/// The management server's list of game servers (`msQueryGameServers` →
/// `msRQueryGameServers`), within `timeout`.
pub async fn mgmt_list(addr: SocketAddr, timeout: Duration) -> Result<ServerListAnswer, Failure> {
    let run = async {
        let mut stream = connect(addr, timeout).await?;
        let mut frame = Vec::new();
        encode_query(&mut frame);
        stream
            .write_all(&frame)
            .await
            .map_err(|e| Failure::Io(e.kind()))?;
        let mut conn = ClientConnection::new();
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let n = stream
                .read(&mut buf)
                .await
                .map_err(|e| Failure::Io(e.kind()))?;
            if n == 0 {
                return Err(Failure::Query(QueryError::Decode(
                    muster_proto::DecodeError::Incomplete("msRQueryGameServers"),
                )));
            }
            conn.handle_input(buf.get(..n).unwrap_or_default());
            while let Some(event) = conn.poll_event() {
                match event {
                    ClientEvent::Answer(answer) => return Ok(answer),
                    ClientEvent::Closed(e) => return Err(Failure::Query(QueryError::Decode(e))),
                    // Other messages are not for us; keep reading.
                    ClientEvent::Discarded(_) | ClientEvent::Unexpected(_) => {}
                }
            }
        }
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Query(QueryError::Timeout)),
    }
}

/// GET `url` (http or https), at most [`MAX_HTTP_BODY`] bytes, within `timeout`.
pub async fn http_get(url: &str, timeout: Duration) -> Result<Vec<u8>, Failure> {
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(concat!("muster/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|_| Failure::Http(0))?;
    let mut response = client.get(url).send().await.map_err(|e| {
        if e.is_timeout() {
            Failure::Query(QueryError::Timeout)
        } else if e.is_connect() {
            Failure::Connect(std::io::ErrorKind::ConnectionRefused)
        } else {
            Failure::Http(0)
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(Failure::Http(status.as_u16()));
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_HTTP_BODY as u64)
    {
        return Err(Failure::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        if e.is_timeout() {
            Failure::Query(QueryError::Timeout)
        } else {
            Failure::Http(status.as_u16())
        }
    })? {
        if body.len() + chunk.len() > MAX_HTTP_BODY {
            return Err(Failure::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_proto::model::ListedServer;

    fn list(addrs: &[&str]) -> ServerList {
        ServerList {
            servers: addrs
                .iter()
                .map(|a| ListedServer {
                    address: a.parse().unwrap(),
                    query_address: Some(a.parse().unwrap()),
                })
                .collect(),
            partial: None,
        }
    }

    #[test]
    fn gamespy_lists_say_their_addresses_are_query_addresses() {
        let l = list(&["10.0.0.1:7778"]);
        let e = gamespy_entries(&l);
        assert_eq!(e[0].address.to_string(), "10.0.0.1:7778");
        assert_eq!(e[0].query_address, Some("10.0.0.1:7778".parse().unwrap()));
        assert!(!e[0].address_is_game);
    }

    #[test]
    fn host_names_are_shown_as_registered() {
        let a = ListedAddress::Host {
            host: "Bomber.Example.".into(),
            port: 40000,
        };
        assert_eq!(a.to_string(), "Bomber.Example.:40000");
        assert_eq!(a.ip(), None);
    }

    mod resumed {
        use std::sync::{Arc, Mutex};
        use std::time::Instant;

        use muster_proto::valve_master::packet::SEED;
        use muster_proto::valve_master::query::{ListAsk, PAGE_INTERVAL};
        use muster_proto::valve_master::{ListReply, ListRequest};

        use super::*;

        const MASTER: &str = "127.0.0.1:27010";

        fn page(servers: &[&str], complete: bool) -> Vec<u8> {
            ListReply {
                key: None,
                servers: servers.iter().map(|s| s.parse().unwrap()).collect(),
                complete,
            }
            .encode()
        }

        fn machine(
            from: &str,
            max_pages: Option<u32>,
        ) -> (ResumedValveList, Arc<Mutex<Vec<ValveProgress>>>) {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let hook = seen.clone();
            let m = ResumedValveList::new(
                MASTER.parse().unwrap(),
                ListAsk::new(b"\\gamedir\\valve"),
                from.parse().unwrap(),
                max_pages,
                Box::new(move |p, _| hook.lock().unwrap().push(*p)),
                QueryConfig {
                    attempt_timeout: Duration::from_millis(500),
                    retries: 2,
                },
            );
            (m, seen)
        }

        fn sent(m: &mut ResumedValveList, now: Instant) -> Option<ListRequest> {
            let mut buf = Vec::new();
            m.poll_transmit(now, &mut buf)?;
            Some(ListRequest::decode(&buf).unwrap())
        }

        #[test]
        fn a_resumed_list_asks_from_its_seed_then_follows_the_pages_at_the_pace() {
            let (mut m, seen) = machine("192.0.2.6:27015", None);
            let master: SocketAddr = MASTER.parse().unwrap();
            let t0 = Instant::now();
            let first = sent(&mut m, t0).unwrap();
            assert_eq!(first.last, "192.0.2.6:27015".parse().unwrap());
            assert_eq!(first.filter, b"\\gamedir\\valve");
            // A re-send before any page keeps the resume seed.
            let retry_at = m.poll_timeout().unwrap();
            m.handle_timeout(retry_at);
            assert_eq!(sent(&mut m, retry_at).unwrap().last, first.last);
            m.handle_datagram(
                retry_at,
                master,
                &page(&["192.0.2.7:1", "192.0.2.8:1"], false),
            );
            assert!(sent(&mut m, retry_at).is_none(), "the next page waits");
            // The master's pace holds after a resume: the next request PAGE_INTERVAL later,
            // seeded with the page's last address.
            assert_eq!(m.poll_timeout(), Some(retry_at + PAGE_INTERVAL));
            let t1 = retry_at + PAGE_INTERVAL;
            m.handle_timeout(t1);
            assert_eq!(
                sent(&mut m, t1).unwrap().last,
                "192.0.2.8:1".parse().unwrap()
            );
            m.handle_datagram(t1, master, &page(&["192.0.2.9:1"], true));
            let seen = seen.lock().unwrap().clone();
            assert_eq!(
                seen,
                [
                    ValveProgress {
                        pages: 1,
                        last: "192.0.2.8:1".parse().unwrap(),
                        complete: false
                    },
                    ValveProgress {
                        pages: 2,
                        last: "192.0.2.9:1".parse().unwrap(),
                        complete: true
                    },
                ]
            );
        }

        #[test]
        fn a_page_cap_ends_the_run_with_a_partial_list_and_its_progress() {
            let (mut m, seen) = machine("0.0.0.0:0", Some(2));
            let master: SocketAddr = MASTER.parse().unwrap();
            let t0 = Instant::now();
            assert_eq!(sent(&mut m, t0).unwrap().last, SEED);
            m.handle_datagram(t0, master, &page(&["192.0.2.1:1", "192.0.2.2:1"], false));
            let t1 = t0 + PAGE_INTERVAL;
            m.handle_timeout(t1);
            assert_eq!(
                sent(&mut m, t1).unwrap().last,
                "192.0.2.2:1".parse().unwrap()
            );
            m.handle_datagram(t1, master, &page(&["192.0.2.3:1", "192.0.2.4:1"], false));
            assert!(m.poll_timeout().is_none(), "no third page is asked");
            assert!(sent(&mut m, t1 + PAGE_INTERVAL).is_none());
            let Some(Event::Done(list)) = m.poll_event() else {
                panic!("a list");
            };
            assert_eq!(list.servers.len(), 4);
            assert!(list.partial.is_some());
            let last = *seen.lock().unwrap().last().unwrap();
            assert_eq!(last.pages, 2);
            assert_eq!(last.last, "192.0.2.4:1".parse().unwrap());
            assert!(!last.complete);
            // Later datagrams change nothing.
            m.handle_datagram(t1, master, &page(&["192.0.2.5:1"], true));
            assert_eq!(seen.lock().unwrap().len(), 2);
        }
    }

    #[tokio::test]
    async fn listed_addresses_resolve_only_when_asked() {
        let ip = ListedAddress::Ip("127.0.0.1:5".parse().unwrap());
        assert_eq!(ip.resolve().await.unwrap(), "127.0.0.1:5".parse().unwrap());
        let host = ListedAddress::Host {
            host: "localhost".into(),
            port: 6,
        };
        let r = host.resolve().await.unwrap();
        assert!(r.ip().is_loopback() && r.port() == 6, "{r}");
    }
}
