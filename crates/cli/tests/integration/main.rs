//! The `muster` binary run as a subprocess, as a user would run it.

mod a2s;
mod addresses;
mod browse;
mod browse_web;
mod cli;
mod common;
mod e2e;
mod exporter;
mod faults;
mod game_key;
mod pacing;
mod packaging;
mod pg_history;
mod postgres;
mod quake3;
mod steam_web;
mod ux;
mod valve_resume;
mod watch;
mod watch_notify;
