#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests and benches, on a free loopback port, in a directory of its own.
#
#   cluster.sh start DIR     initdb (if DIR has no cluster yet) and start; prints the URL
#                            postgres://muster:muster@127.0.0.1:PORT/postgres (also kept in DIR/url)
#   cluster.sh restart DIR   pg_ctl restart -m fast, same port (tests restart the database mid-run)
#   cluster.sh stop DIR      pg_ctl stop -m fast
#   cluster.sh remove DIR    stop and delete DIR
#
# No system service is used or assumed. initdb refuses to run as root: as root, the cluster belongs to
# the `postgres` user that Debian's package creates (or `nobody` if it is missing) and every pg_ctl call
# runs as that user through runuser (its files go under /tmp when that user cannot reach DIR); otherwise it
# runs as the caller. The server listens on 127.0.0.1 only (its Unix socket beside its data),
# authentication is scram-sha-256 with the password `muster`, fsync is off (a test database; the tests
# kill Muster, never this server).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

cmd=${1:-}
dir=${2:-}
[[ -n $cmd && -n $dir ]] || { echo "usage: $0 start|restart|stop|remove DIR" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# Where the server's own files live: DIR itself, or (when the server's user cannot reach DIR, e.g. a
# checkout under a private home directory) a directory under /tmp named in DIR/home.
home=$(cat "$dir/home" 2>/dev/null || echo "$dir")
data=$home/data

bin=$(bash "$here/install.sh")

as_owner=()
if [[ $(id -u) == 0 ]]; then
    owner=postgres
    id -u "$owner" >/dev/null 2>&1 || owner=nobody
    as_owner=(runuser -u "$owner" --)
fi
run() { "${as_owner[@]}" "$@"; }

ctl() { run "$bin/pg_ctl" -D "$data" -l "$home/server.log" -w -t 60 "$@"; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

case $cmd in
start)
    if [[ ! -f $data/PG_VERSION ]]; then
        rm -rf "$data"
        if [[ ${#as_owner[@]} -gt 0 ]]; then
            chown "${as_owner[2]}" "$dir"
            if ! run test -w "$dir"; then
                home=$(mktemp -d /tmp/muster-pg.XXXXXX)
                chown "${as_owner[2]}" "$home"
                echo "$home" > "$dir/home"
                data=$home/data
            fi
        fi
        printf 'muster\n' > "$home/pwfile"
        if [[ ${#as_owner[@]} -gt 0 ]]; then chown "${as_owner[2]}" "$home/pwfile"; fi
        run "$bin/initdb" -D "$data" -U muster --pwfile="$home/pwfile" --auth-local=trust \
            --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
            || { cat "$dir/initdb.log" >&2; exit 1; }
        rm -f "$home/pwfile"
        port=$(free_port)
        cat >> "$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$home'
fsync = off
max_connections = 200
CONF
        echo "postgres://muster:muster@127.0.0.1:$port/postgres" > "$dir/url"
    fi
    if ! run "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        ctl start >/dev/null || { tail -20 "$home/server.log" >&2; exit 1; }
    fi
    cat "$dir/url"
    ;;
restart)
    ctl restart -m fast >/dev/null
    ;;
stop)
    if [[ -f $data/PG_VERSION ]] && run "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        ctl stop -m fast >/dev/null
    fi
    ;;
remove)
    if [[ -f $data/PG_VERSION ]] && run "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        ctl stop -m fast >/dev/null || true
    fi
    [[ $home != "$dir" ]] && rm -rf "$home"
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start|restart|stop|remove DIR" >&2
    exit 2
    ;;
esac
