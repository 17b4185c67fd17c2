//! Which responder and registrars an emulated server of each protocol gets, and on which port.
//!
//! | protocol | query port | styles | masters |
//! |---|---|---|---|
//! | `gameagent` | game + 1 | `seed` (default: names as typed, as seed 001 shows them), `x86` (stock: `^o…^r`, non-ASCII names become the `12` mark), `arm` (stock, names pass) | `gameagent:host:port` |
//! | `gamespy1` | game + 1; + 10 with style `ut2003` or `ut2003demo`; + `gamespy_offset` when set | UT2003's format (default), `ut2003`, `ut2003demo`, `ut99`, `unreal`, `serioussam` | `gamespy:host:port` |
//! | `unreal2` | game + 1, and GameSpy v1 at + `gamespy_offset` when set | `ut2004` (default), `ut2003` | `gamespy:host:port` (needs `gamespy_offset`) |
//! | `teeworlds` | game port | one: 0.6, DDNet extended and 0.7 on one port | `teeworlds07:host:port`, `ddnet:URL` |
//! | `a2s` | game port | `source` (default), `goldsrc`, `ship`; `require_challenge`, `compress` | `valve:host:port` (Half-Life / Xash3D master, default port 27010) |
//! | `quake3` | game port | `ioquake3` (default: `heartbeat QuakeArena-1`, Windows-1252), `darkplaces` (`heartbeat DarkPlaces`, UTF-8, `qcstatus`) | `quake3:host:port` (dpmaster, default port 27950) |
//!
//! Any server may also name `mgmt:host:port`: it then stays registered with that management
//! server over TCP (name, its listen address, game port, player counts).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Instant;

use muster_proto::gameagent::register::{GameAgentRegistrar, RegistrarConfig};
use muster_proto::gameagent::respond::{GameAgentResponder, NameMarks, ResponderConfig};
use muster_proto::gamespy_master::register::{GameSpyRegistrar, GameSpyRegistrarConfig};
use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
use muster_proto::quake3::register::Quake3Registrar;
use muster_proto::quake3::respond::{Quake3Responder, Style as Quake3Style};
use muster_proto::teeworlds::respond::{ResponderConfig as TeeworldsConfig, TeeworldsResponder};
use muster_proto::teeworlds_master::{
    DdnetHttpRegistrar, DdnetRegisterConfig, TeeworldsUdpRegistrar, Token,
};
use muster_proto::unreal2::respond::{Unreal2Responder, Unreal2Settings};

use crate::farm::{FarmProtocol, FarmServer, MasterTarget};
use crate::run::{Endpoint, ExtraSocket};
use crate::udp::BoxedRegistrar;

fn resolve(master: &MasterTarget, default_port: u16) -> Result<SocketAddr, String> {
    let text = if master.address.contains(':') && !master.address.ends_with(']') {
        master.address.clone()
    } else {
        format!("{}:{default_port}", master.address)
    };
    text.to_socket_addrs()
        .map_err(|e| format!("master {}: {e}", master.address))?
        .next()
        .ok_or_else(|| format!("master {}: no address", master.address))
}

/// A random UUID (version 4 form), as DDNet servers make their register secrets.
fn uuid() -> String {
    let b: [u8; 16] = rand::random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-4{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn unknown_style(protocol: FarmProtocol, style: &str) -> String {
    format!("unknown style {style:?} for {}", protocol.name())
}

fn wrong_master(protocol: FarmProtocol, master: &MasterTarget) -> String {
    format!(
        "a {} server cannot register with a {:?} master",
        protocol.name(),
        master.protocol
    )
}

fn query_port(game_port: u16, offset: u16) -> Result<u16, String> {
    game_port
        .checked_add(offset)
        .ok_or_else(|| format!("game port {game_port} has no query port"))
}

/// The responder, registrars and query port of `server`.
pub fn endpoint(server: &FarmServer) -> Result<Endpoint, String> {
    // Any emulated server may also keep itself registered with a management server.
    let (mgmt, others): (Vec<&MasterTarget>, Vec<&MasterTarget>) =
        server.masters.iter().partition(|m| m.protocol == "mgmt");
    let mgmt = mgmt
        .into_iter()
        .map(|m| {
            Ok(crate::mgmt::MgmtTarget {
                master: resolve(m, muster_proto::mgmt::PORT)?,
                address: server.bind.to_string(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut ep = protocol_endpoint(server, &others)?;
    ep.mgmt = mgmt;
    Ok(ep)
}

/// GameSpy registrars for `masters` (all must be `gamespy:`), heartbeating query port `port`.
fn gamespy_registrars(
    server: &FarmServer,
    masters: &[&MasterTarget],
    profile: Profile,
    port: u16,
) -> Result<Vec<BoxedRegistrar>, String> {
    let mut registrars: Vec<BoxedRegistrar> = Vec::new();
    for m in masters {
        if m.protocol != "gamespy" {
            return Err(wrong_master(server.protocol, m));
        }
        let addr = resolve(m, 27900)?;
        registrars.push(Box::new(GameSpyRegistrar::new(
            GameSpyRegistrarConfig::new(addr, profile, port),
            Instant::now(),
        )));
    }
    Ok(registrars)
}

/// Half-Life / Xash3D registrars for `masters` (all must be `valve:`), announcing protocol 48.
fn valve_registrars(
    server: &FarmServer,
    masters: &[&MasterTarget],
) -> Result<Vec<BoxedRegistrar>, String> {
    let mut registrars: Vec<BoxedRegistrar> = Vec::new();
    for m in masters {
        if m.protocol != "valve" {
            return Err(wrong_master(server.protocol, m));
        }
        let addr = resolve(m, muster_proto::valve_master::MASTER_PORT)?;
        registrars.push(Box::new(
            muster_proto::valve_master::register::ValveRegistrar::new(
                addr,
                48,
                rand::random(),
                &server.state,
            ),
        ));
    }
    Ok(registrars)
}

fn protocol_endpoint(server: &FarmServer, masters: &[&MasterTarget]) -> Result<Endpoint, String> {
    let style = server.style.as_deref();
    let game_port = server.state.game_port;
    let mut registrars: Vec<BoxedRegistrar> = Vec::new();
    match server.protocol {
        FarmProtocol::Gameagent => {
            let name_marks = NameMarks::from_style_name(style)
                .ok_or_else(|| unknown_style(server.protocol, style.unwrap_or("")))?;
            for m in masters {
                if m.protocol != "gameagent" {
                    return Err(wrong_master(server.protocol, m));
                }
                let addr = resolve(m, 9005)?;
                registrars.push(Box::new(GameAgentRegistrar::new(
                    RegistrarConfig::new(addr),
                    &server.state,
                )));
            }
            Ok(Endpoint {
                responder: Box::new(GameAgentResponder::new(ResponderConfig {
                    name_marks,
                    ..ResponderConfig::default()
                })),
                registrars,
                port: query_port(game_port, 1)?,
                mgmt: Vec::new(),
                extra: Vec::new(),
            })
        }
        FarmProtocol::Gamespy1 => {
            let profile = Profile::from_style_name(style)
                .ok_or_else(|| unknown_style(server.protocol, style.unwrap_or("")))?;
            let port = query_port(game_port, server.gamespy_offset.unwrap_or(1))?;
            Ok(Endpoint {
                responder: Box::new(GameSpyResponder::with_profile(profile)),
                registrars: gamespy_registrars(server, masters, profile, port)?,
                port,
                mgmt: Vec::new(),
                extra: Vec::new(),
            })
        }
        FarmProtocol::Unreal2 => {
            let settings = Unreal2Settings::for_style_name(style)
                .ok_or_else(|| unknown_style(server.protocol, style.unwrap_or("")))?;
            // A real UT2003/UT2004 server answers GameSpy v1 as well (usually at game port
            // + 10) and heartbeats from there; without that port it cannot be listed.
            let extra = match server.gamespy_offset {
                Some(offset) => {
                    let port = query_port(game_port, offset)?;
                    vec![ExtraSocket {
                        protocol: FarmProtocol::Gamespy1,
                        port,
                        responder: Box::new(GameSpyResponder::with_profile(Profile::Ut2003)),
                        registrars: gamespy_registrars(server, masters, Profile::Ut2003, port)?,
                    }]
                }
                None => match masters.first() {
                    Some(m) => return Err(wrong_master(server.protocol, m)),
                    None => Vec::new(),
                },
            };
            Ok(Endpoint {
                responder: Box::new(Unreal2Responder::new(settings)),
                registrars,
                port: query_port(game_port, 1)?,
                mgmt: Vec::new(),
                extra,
            })
        }
        FarmProtocol::A2s => {
            let a2s = muster_proto::a2s::respond::Style::from_name(style)
                .ok_or_else(|| unknown_style(server.protocol, style.unwrap_or("")))?;
            registrars = valve_registrars(server, masters)?;
            Ok(Endpoint {
                responder: Box::new(
                    muster_proto::a2s::respond::A2sResponder::new(
                        a2s,
                        server.require_challenge,
                        rand::random(),
                    )
                    .with_compression(server.compress),
                ),
                registrars,
                port: game_port,
                mgmt: Vec::new(),
                extra: Vec::new(),
            })
        }
        FarmProtocol::Quake3 => {
            let q3 = Quake3Style::from_name(style)
                .ok_or_else(|| unknown_style(server.protocol, style.unwrap_or("")))?;
            for m in masters {
                if m.protocol != "quake3" {
                    return Err(wrong_master(server.protocol, m));
                }
                let addr = resolve(m, muster_proto::quake3::MASTER_PORT)?;
                registrars.push(Box::new(Quake3Registrar::new(addr, q3, &server.state)));
            }
            Ok(Endpoint {
                responder: Box::new(Quake3Responder::new(q3)),
                registrars,
                port: game_port,
                mgmt: Vec::new(),
                extra: Vec::new(),
            })
        }
        FarmProtocol::Teeworlds => {
            if let Some(s) = style {
                return Err(unknown_style(server.protocol, s));
            }
            let now = Instant::now();
            for m in masters {
                match m.protocol.as_str() {
                    "teeworlds07" => {
                        let addr = resolve(m, 8283)?;
                        registrars.push(Box::new(TeeworldsUdpRegistrar::new(
                            &[addr],
                            game_port,
                            Token(rand::random()),
                            now,
                        )));
                    }
                    "ddnet" => {
                        if !(m.address.starts_with("http://") || m.address.starts_with("https://"))
                        {
                            return Err(format!(
                                "ddnet master {:?} is not an http:// or https:// URL (a DDNet \
                                 master's is http://HOST:PORT/ddnet/15/register)",
                                m.address
                            ));
                        }
                        let config = DdnetRegisterConfig::ipv4(
                            &m.address,
                            game_port,
                            &uuid(),
                            &uuid(),
                            Token(rand::random()),
                        );
                        registrars.push(Box::new(DdnetHttpRegistrar::new(
                            config,
                            &server.state,
                            now,
                        )));
                    }
                    _ => return Err(wrong_master(server.protocol, m)),
                }
            }
            Ok(Endpoint {
                // The 0.7 tokens are derived from this secret, fresh per run.
                responder: Box::new(TeeworldsResponder::new(
                    TeeworldsConfig::default(),
                    rand::random(),
                )),
                registrars,
                port: game_port,
                mgmt: Vec::new(),
                extra: Vec::new(),
            })
        }
    }
}
