# Muster's master daemon in a container: `muster serve`, every face, data in a volume.
#
#   docker build -t muster .
#   docker run -d --name muster -v muster-data:/var/lib/muster \
#     -p 8080:8080 -p 9005:9005/udp -p 27900:27900/udp -p 28900:28900 \
#     -p 8283:8283/udp -p 8284:8284/udp -p 8300:8300/udp -p 51963:51963 -p 27950:27950/udp \
#     -p 27010:27010/udp muster
#
# Any other command works too: `docker run --rm muster query -p teeworlds HOST:8303`.
# Mount a config at /etc/muster/muster.toml and add `--config /etc/muster/muster.toml` to
# the command to change the defaults (`muster serve --print-config` shows them all).

# --- build ----------------------------------------------------------------------------------
FROM rust:1-bookworm AS build
WORKDIR /src
# The manifests first, so that the dependencies are a cached layer of their own.
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
RUN cargo build --release --locked -p muster \
 && mkdir -p /out/man \
 && cp target/release/muster /out/muster \
 && /out/muster man --dir /out/man

# --- run ------------------------------------------------------------------------------------
FROM debian:bookworm-slim
# ca-certificates: https list URLs (`muster list -p ddnet https://…`).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/muster \
      --shell /usr/sbin/nologin muster \
 && install -d -o muster -g muster -m 0750 /var/lib/muster
COPY --from=build /out/muster /usr/local/bin/muster
COPY --from=build /out/man/ /usr/local/share/man/man1/
USER muster:muster
WORKDIR /var/lib/muster
VOLUME ["/var/lib/muster"]
# http (browser, API, DDNet register), gamespy lists, management server (TCP);
# gameagent, gamespy heartbeats, teeworlds 0.7 master and its checker, teeworlds 0.6 (UDP).
EXPOSE 8080/tcp 28900/tcp 51963/tcp 9005/udp 27900/udp 8283/udp 8284/udp 8300/udp 27950/udp 27010/udp
STOPSIGNAL SIGTERM
ENTRYPOINT ["muster"]
CMD ["serve", "--data-dir", "/var/lib/muster"]
