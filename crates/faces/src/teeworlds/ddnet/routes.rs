//! The DDNet routes: thin axum handlers. A register POST is read (bucket and length first,
//! then the body), handed to the [`RegisterMachine`], its registry command run and its
//! challenge handed to the runtime's sender; the answer waits for the store where the
//! machine says so. `servers.json` comes from [`super::servers_json`], through the router or
//! from its file ([`ServersJsonFile`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_proto::teeworlds_master::RegisterResponse;

use super::register::{AfterRegister, Answer, Cx, Then, after_register, too_large};
use super::servers_json::{accepts_gzip, accepts_gzip_in, current_document, gzipped};
use super::{DdnetFace, MAX_PENDING_DELETES, PendingDelete, SERVERS_JSON_PATH, lock, request};
use crate::runtime::http::{FileAnswer, FileResponse, FileRoute, RequestTime};
use muster_core::drops::DropReason;
use muster_core::memfile::MemFile;

/// The register machine's view of the world when the request arrived.
fn cx(face: &DdnetFace, at: RequestTime) -> Cx<'_> {
    Cx {
        now: at.now,
        wall: at.wall,
        metrics: face.handle.metrics(),
        proven: &face.handle,
    }
}

/// When the HTTP runner received `req` (it stamps every request).
fn arrived(req: &Request) -> Option<RequestTime> {
    req.extensions().get::<RequestTime>().copied()
}

pub(super) async fn register(State(face): State<Arc<DdnetFace>>, req: Request) -> Response {
    let (Some(ip), Some(at)) = (peer_ip(&req), arrived(&req)) else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no peer address or arrival time (not served by the HTTP runner)",
        );
    };
    let (parts, body) = req.into_parts();
    let limit = {
        let mut machine = lock(&face.machine);
        if let Some(a) = machine.admit(&cx(&face, at), ip, &parts.headers) {
            return respond(a);
        }
        machine.body_limit()
    };
    let Ok(body) = axum::body::to_bytes(Body::new(body), limit).await else {
        return respond(too_large(face.handle.metrics()));
    };
    let step = lock(&face.machine).on_request(&cx(&face, at), ip, &parts.headers, &body);
    let response = match step.then {
        Then::Answer(a) => respond(a),
        Then::Register(cmd) => registered(&face, cmd.0, cmd.1, at).await,
        Then::Delete { secret, url } => delete(&face, secret, url).await,
    };
    if let Some(chal) = step.challenge
        && face.challenges.send_to(chal.to, &chal.bytes).await.is_err()
    {
        face.handle
            .metrics()
            .count_drop(DropReason::NoChallengeSocket);
    }
    response
}

/// Runs a registration, and answers it once stored when it listed the server.
async fn registered(
    face: &DdnetFace,
    d: muster_core::registry::DdnetRegister,
    reg: muster_core::registry::Registration,
    at: RequestTime,
) -> Response {
    let m = face.handle.metrics();
    let key = reg.key.clone();
    let out = face.handle.ddnet_register(d, reg, at.wall);
    let visible = match after_register(out) {
        AfterRegister::Answer(a) => return respond(a),
        AfterRegister::Success { visible } => visible,
    };
    // Acknowledged only once stored. A refresh of a stored record moves only times (a crash
    // loses at most those, until the next periodic flush) and is answered at once; but a
    // record whose registration the store has not confirmed (an earlier attempt answered 503,
    // or one still waiting) is not stored, and its refresh waits for the same write as a new
    // registration.
    if let Some(version) = face.handle.unstored(&key)
        && let Err(e) = face.handle.durable(version).await
    {
        m.count_drop(DropReason::NotStored);
        tracing::warn!(error = %muster_proto::errors::error_chain(&e), "ddnet registration not stored");
        return error(StatusCode::SERVICE_UNAVAILABLE, "storage failed");
    }
    if visible {
        // Once the lists show it, too.
        face.handle.visible(face.handle.version()).await;
    }
    json_response(StatusCode::OK, &RegisterResponse::Success)
}

/// `Action: delete`: the stream goes if it is registered at the peer's IP under this secret.
///
/// The stream leaves the registry (and the lists) at once; `success` is answered only once the
/// store has the removal. When the store does not confirm it within the durable timeout (a
/// full disk) the answer is 503: the removal stands in memory and the persister keeps writing
/// it until the store takes it, but a restart before then would load the stream again (to
/// expire by its lifetime). A retry of that delete no longer finds the stream, so the face
/// keeps the version it waits for ([`MAX_PENDING_DELETES`]): the retry is answered `success`
/// once the store has it, 503 while not.
async fn delete(face: &DdnetFace, secret: Box<str>, url: String) -> Response {
    let m = face.handle.metrics();
    let removed = face
        .handle
        .write(|r| r.ddnet_delete(&secret, &url).map(|_| r.version()));
    let pending_key: PendingDelete = (secret, Box::from(url.as_str()));
    let version = match removed {
        Some(v) => v,
        None => match lock(&face.pending_deletes).get(&pending_key).copied() {
            Some(v) => v,
            None => {
                m.count_drop(DropReason::UnknownServer);
                return error(StatusCode::BAD_REQUEST, request::NOT_FOUND);
            }
        },
    };
    if let Err(e) = face.handle.durable(version).await {
        m.count_drop(DropReason::NotStored);
        tracing::warn!(error = %muster_proto::errors::error_chain(&e), "ddnet deletion not stored");
        let persisted = face.handle.persisted();
        let mut pending = lock(&face.pending_deletes);
        pending.retain(|_, v| *v > persisted);
        if pending.len() < MAX_PENDING_DELETES || pending.contains_key(&pending_key) {
            pending.insert(pending_key, version);
        }
        return error(StatusCode::SERVICE_UNAVAILABLE, "storage failed");
    }
    lock(&face.pending_deletes).remove(&pending_key);
    // Read-your-writes: once the goodbye is answered, no list shows the stream.
    face.handle.visible(version).await;
    json_response(StatusCode::OK, &RegisterResponse::Success)
}

pub(super) async fn servers_json(State(face): State<Arc<DdnetFace>>, req: Request) -> Response {
    let Some(at) = arrived(&req) else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no arrival time (not served by the HTTP runner)",
        );
    };
    if let Some(ip) = peer_ip(&req)
        && !face.allow_servers_json(ip, true, at.now)
    {
        return too_many(face.settings.servers_json_refill);
    }
    face.handle.metrics().count_list_request("ddnet");
    let doc = current_document(&face.documents, at.now).await;
    let gzip = accepts_gzip(req.headers());
    let tag = doc.tag(gzip);
    let not_modified = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| crate::runtime::http::none_match_hits(v, &tag));
    if not_modified {
        let mut res = Response::new(Body::empty());
        *res.status_mut() = StatusCode::NOT_MODIFIED;
        if let Ok(v) = HeaderValue::from_str(&tag) {
            res.headers_mut().insert(header::ETAG, v);
        }
        return res;
    }
    let file = if gzip {
        gzipped(&face.documents, &doc).await
    } else {
        doc.plain.clone()
    };
    // Read back from its file once per document: few requests come here, plain GETs
    // are sent from the file.
    let heap = if gzip { &doc.heap_gz } else { &doc.heap_plain };
    let body = heap
        .get_or_try_init(|| async move {
            match muster_core::bulk::spawn(move || file.bytes()).await {
                Ok(Ok(b)) => Ok(b),
                _ => Err(()),
            }
        })
        .await;
    let Ok(body) = body.cloned() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "servers.json could not be read",
        );
    };
    let mut res = Response::new(Body::from(body));
    res.extensions_mut()
        .insert(crate::runtime::http::Precompressed);
    let h = res.headers_mut();
    for (name, value) in doc.headers(gzip) {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    res
}

/// `servers.json` sent from its file (see the module docs of [`super`]).
#[derive(Debug)]
pub(super) struct ServersJsonFile(pub(super) Arc<DdnetFace>);

impl FileRoute for ServersJsonFile {
    fn respond(
        &self,
        path: &str,
        headers: &[httparse::Header<'_>],
        peer: SocketAddr,
        at: RequestTime,
    ) -> Option<FileAnswer> {
        if path != SERVERS_JSON_PATH {
            return None;
        }

        let gzip = accepts_gzip_in(
            headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("accept-encoding"))
                .map(|h| h.value),
        );
        let face = Arc::clone(&self.0);
        Some(Box::pin(async move {
            let doc = current_document(&face.documents, at.now).await;
            let body = if gzip {
                gzipped(&face.documents, &doc).await
            } else {
                doc.plain.clone()
            };
            // A body in the heap (no file could be made) goes through the router.
            let MemFile::File { file, len } = body else {
                return None;
            };
            // Refused: the router answers, and refuses it the same way (429).
            if !face.allow_servers_json(peer.ip(), false, at.now) {
                return None;
            }
            face.handle.metrics().count_list_request("ddnet");
            let mut head = String::from("HTTP/1.1 200 OK\r\n");
            for (name, value) in doc.headers(gzip) {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str(&format!(
                "content-length: {len}\r\ndate: {}\r\n\r\n",
                at.http_date()
            ));
            Some(FileResponse {
                head: head.into_bytes(),
                file,
                len,
            })
        }))
    }
}

/// The machine's answer as a response.
fn respond(a: Answer) -> Response {
    match a {
        Answer::Json(status, r) => json_response(status, &r),
        Answer::TooMany(retry_after) => too_many(retry_after),
    }
}

/// `429 Too Many Requests` with `Retry-After`, as a register answer.
fn too_many(retry_after: std::time::Duration) -> Response {
    let mut res = error(StatusCode::TOO_MANY_REQUESTS, "rate limited");
    res.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_after.as_secs().max(1)),
    );
    res
}

/// A register answer: the JSON body and the newline the reference master ends it with.
fn json_response(status: StatusCode, r: &RegisterResponse) -> Response {
    let mut body = Vec::with_capacity(64);
    r.encode(&mut body);
    body.push(b'\n');
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(super) fn error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        &RegisterResponse::Error {
            message: message.to_owned(),
        },
    )
}

/// The peer's IP, an IPv4-mapped one made IPv4.
fn peer_ip(req: &Request) -> Option<IpAddr> {
    let ConnectInfo(addr) = req.extensions().get::<ConnectInfo<SocketAddr>>()?;
    Some(addr.ip().to_canonical())
}
