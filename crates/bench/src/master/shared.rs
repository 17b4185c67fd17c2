//! `muster-bench master --store postgres://…`: two masters on one PostgreSQL registry against
//! one master on SQLite, in the same run.
//!
//! For each `--servers N`, first one child on SQLite (its data directory), then two children
//! sharing a fresh database `muster_bench_<pid>_<N>` created on the server of `--store` (its
//! user must be allowed to create databases):
//!
//! 1. **Registrations**: N GameAgent registrations over UDP (`q` → challenge → heartbeat),
//!    `--in-flight` at once; with two instances half go to each, at the same time. Timed until
//!    every instance lists all N (with two: each lists its own half and the other's).
//! 2. **Propagation**: registrations at `--probe-rate` per second for `--load-duration` on the
//!    first instance while the second's listed count is sampled every 2 ms; the k-th
//!    registration's propagation is the time from its heartbeat until the second lists k of
//!    them (they commit in order). Includes the persister's delay, the commit, NOTIFY, the
//!    catch-up and the publish.
//! 3. **Lists**: the API's default page (keep-alive) and GameAgent `e`, `--clients` clients per
//!    instance for `--duration`, both instances at once: requests per second per instance.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::child::ChildMaster;
use super::stats::{Client, Latencies, measure};
use super::wire::{GameAgentList, register_gameagent, source_ip};
use super::{MasterArgs, Path, http_clients};
use crate::table;

/// One store's figures at one size.
#[derive(Debug, Default)]
struct Run {
    store: String,
    instances: usize,
    reg_per_sec: f64,
    reg_ok: usize,
    propagation: Latencies,
    api_per_sec: Vec<f64>,
    ga_per_sec: Vec<f64>,
}

/// Runs the comparison for every size and prints one table per size.
pub(crate) async fn run(args: &MasterArgs, store: &str) -> anyhow::Result<()> {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "muster-bench master --store: {} cores, load average at start {}; the machine is shared \
         (other agents compile and test on the same cores), so rates vary between runs",
        std::thread::available_parallelism().map_or(1, usize::from),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "store: {}; registrations {} in flight; propagation probe {}/s for {:?}; lists {} \
         clients per instance × {:?}",
        muster_master::store::postgres::redact(store),
        args.in_flight,
        args.probe_rate,
        args.load_duration,
        args.clients,
        args.duration
    );
    for &n in &args.servers {
        println!();
        println!("== {n} servers ==");
        let sqlite = one(args, n, None).await?;
        let name = format!("muster_bench_{}_{n}", std::process::id());
        let url = muster_master::store::postgres::create_database(store, &name)
            .await
            .context("creating the bench database (the --store user needs CREATEDB)")?;
        let pg = one(args, n, Some(&url)).await?;
        print(&[sqlite, pg]);
    }
    Ok(())
}

fn fmt_rates(v: &[f64]) -> String {
    v.iter()
        .map(|r| format!("{r:.0}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn print(runs: &[Run]) {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let q = |p| {
                r.propagation
                    .quantile_ms(p)
                    .map_or_else(|| "–".to_owned(), |ms| format!("{ms:.0} ms"))
            };
            vec![
                r.store.clone(),
                r.instances.to_string(),
                format!("{:.0} ({} listed)", r.reg_per_sec, r.reg_ok),
                if r.instances > 1 {
                    format!("{} / {} ({})", q(0.5), q(0.99), r.propagation.len())
                } else {
                    "–".to_owned()
                },
                fmt_rates(&r.api_per_sec),
                fmt_rates(&r.ga_per_sec),
            ]
        })
        .collect();
    print!(
        "{}",
        table::render(
            &[
                "store",
                "instances",
                "registrations/s",
                "propagation p50 / p99 (n)",
                "API page req/s per instance",
                "GameAgent `e` req/s per instance",
            ],
            &rows
        )
    );
}

/// One store at one size: one child on SQLite (`url` `None`) or two on `url`.
async fn one(args: &MasterArgs, n: usize, url: Option<&str>) -> anyhow::Result<Run> {
    let count = if url.is_some() { 2 } else { 1 };
    let mut ms = Vec::new();
    for _ in 0..count {
        ms.push(ChildMaster::spawn_with(n, false, url)?);
    }
    let mut run = Run {
        store: if url.is_some() {
            "postgresql"
        } else {
            "sqlite"
        }
        .to_owned(),
        instances: count,
        ..Run::default()
    };
    eprintln!("  {}: registering {n} GameAgent servers …", run.store);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let per = n.div_ceil(count);
    for (k, m) in ms.iter().enumerate() {
        let ga = m.addr("gameagent")?;
        let first = k * per;
        let todo = per.min(n.saturating_sub(first));
        let in_flight = args.in_flight / count;
        tasks.spawn(async move { ingest_range(ga, first, todo, in_flight).await });
    }
    let mut ok = 0;
    while let Some(r) = tasks.join_next().await {
        ok += r?;
    }
    // Until every instance lists every registration (10 s after the last change at most).
    let mut last = (0, Instant::now());
    loop {
        let mut least = usize::MAX;
        for m in &mut ms {
            least = least.min(m.listed("gameagent")?);
        }
        if least != last.0 {
            last = (least, Instant::now());
        }
        if least >= ok || last.1.elapsed() > Duration::from_secs(10) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = last.1.duration_since(start).as_secs_f64();
    run.reg_ok = last.0;
    run.reg_per_sec = last.0 as f64 / secs.max(1e-9);

    if count == 2 {
        eprintln!("  propagation probe …");
        run.propagation = propagation(args, &mut ms, 3_000_000).await?;
    }

    eprintln!("  lists, every instance at once …");
    let mut listed = Vec::new();
    for m in &mut ms {
        listed.push(m.listed("gameagent")?);
    }
    let mut api = Vec::new();
    let mut ga = Vec::new();
    for (k, m) in ms.iter().enumerate() {
        let base = 250_000 + k * 1000;
        api.push(http_clients(
            m.addr("http")?,
            base,
            args.clients,
            true,
            &Path::Fixed("/api/v1/servers".to_owned()),
            false,
        ));
        let mut g: Vec<Box<dyn Client>> = Vec::new();
        for c in 0..args.clients {
            g.push(Box::new(GameAgentList::new(
                source_ip(base + 500 + c),
                m.addr("gameagent")?,
                listed[k],
            )?));
        }
        ga.push(g);
    }
    let rates = futures_join(api.into_iter().map(|c| measure(c, args.duration))).await;
    run.api_per_sec = rates.iter().map(super::stats::Rate::per_sec).collect();
    let rates = futures_join(ga.into_iter().map(|c| measure(c, args.duration))).await;
    run.ga_per_sec = rates.iter().map(super::stats::Rate::per_sec).collect();
    for m in ms {
        m.quit()?;
    }
    Ok(run)
}

/// Runs the futures at once on the runtime and returns their outputs in order.
async fn futures_join<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        if let Ok(v) = h.await {
            out.push(v);
        }
    }
    out
}

/// `n` GameAgent registrations from sources `first / 100 …` with `in_flight` loops; returns
/// how many were answered.
async fn ingest_range(ga: std::net::SocketAddr, first: usize, n: usize, in_flight: usize) -> usize {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..in_flight.max(1) {
        let next = Arc::clone(&next);
        tasks.spawn(async move {
            let mut ok = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return ok;
                }
                let j = first + i;
                if register_gameagent(source_ip(j / 100), (j % 100) as u16, ga)
                    .await
                    .is_ok()
                {
                    ok += 1;
                }
            }
        });
    }
    let mut ok = 0;
    while let Some(Ok(k)) = tasks.join_next().await {
        ok += k;
    }
    ok
}

/// Registrations on the first instance at the probe rate, the second's count sampled; the
/// propagation time of each (see the module docs).
async fn propagation(
    args: &MasterArgs,
    ms: &mut [ChildMaster],
    base: usize,
) -> anyhow::Result<Latencies> {
    let [a, b] = ms else {
        anyhow::bail!("two instances expected");
    };
    let ga = a.addr("gameagent")?;
    let before = b.listed("gameagent")?;
    let rate = args.probe_rate.max(1);
    let total = (f64::from(rate) * args.load_duration.as_secs_f64()) as usize;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let sender = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut tasks = tokio::task::JoinSet::new();
        for k in 0..total {
            tick.tick().await;
            let tx = tx.clone();
            // One server per source: the probe never meets a per-source cap.
            let src = source_ip(base + k);
            tasks.spawn(async move {
                if register_gameagent(src, 0, ga).await.is_ok() {
                    let _ = tx.send(Instant::now());
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    });
    // (count seen, when first seen), sampled until the sender is done and the count settles.
    let mut seen: Vec<Instant> = Vec::new();
    let mut done_at: Option<Instant> = None;
    loop {
        let now_count = b.listed("gameagent")?.saturating_sub(before);
        let t = Instant::now();
        while seen.len() < now_count {
            seen.push(t);
        }
        if sender.is_finished() {
            let d = *done_at.get_or_insert(t);
            if seen.len() >= total || d.elapsed() > Duration::from_secs(5) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut sent = Vec::new();
    while let Ok(t) = rx.try_recv() {
        sent.push(t);
    }
    sent.sort();
    let mut lat = Latencies::default();
    for (s, v) in sent.iter().zip(&seen) {
        lat.push(v.saturating_duration_since(*s));
    }
    Ok(lat)
}
