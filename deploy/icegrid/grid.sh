#!/usr/bin/env bash
# A throw-away IceGrid on one machine, for tests and trying the descriptor: one registry and N nodes on
# loopback, all state under one directory, torn down by `down`. Uses registry.conf/node.conf from this folder
# and overrides only what differs locally (ports, paths, node names) on the command line.
#
#   deploy/icegrid/grid.sh up   [-d DIR] [-p PORT] [-n NODES] [-s CERTS]
#                                                                registry + node1..nodeN (default 2); with -s
#                                                                every endpoint is ssl (certificates from
#                                                                `icecrawler certs`, made in CERTS if missing)
#   deploy/icegrid/grid.sh node [-d DIR] NAME                    start one more node (a "new machine")
#   deploy/icegrid/grid.sh admin [-d DIR] COMMAND...             run one icegridadmin command
#   deploy/icegrid/grid.sh deploy [-d DIR] [NAME=VALUE...]       application add icecrawler.xml (local defaults;
#                                                                servers run $ICECRAWLER_PYTHON, default .venv)
#   deploy/icegrid/grid.sh down [-d DIR]                         stop nodes (they stop their servers), registry
#
# TLS mode (-s): registry, nodes and icegridadmin (Ice 3.7) load the IceSSL plug-in, the registry's client,
# server and internal endpoints and the nodes' endpoints are ssl, and `deploy` passes protocol=ssl plus the
# ssl_* variables, so the servers' endpoints are ssl too. Certificates: registry, admin, node (shared by the
# servers, as every machine would install its own as node.pem) and one per node process (node1, node2, ...).
#
# Needs icegridregistry/icegridnode (Debian zeroc-icegrid) and icegridadmin (zeroc-ice-utils).
# Every wait is bounded; `down` escalates to SIGKILL after 15 s.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${ICEGRID_DIR:-$REPO/var/icegrid}"
PORT="${ICEGRID_PORT:-}"
NODES=2
CERTS=""

die() { echo "grid.sh: $*" >&2; exit 1; }

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

[[ $# -ge 1 ]] || usage
ACTION="$1"; shift
while [[ $# -gt 0 ]]; do
    case "$1" in
        -d) DIR="$2"; shift 2 ;;
        -p) PORT="$2"; shift 2 ;;
        -n) NODES="$2"; shift 2 ;;
        -s) CERTS="$2"; shift 2 ;;
        -h|--help) usage ;;
        *) break ;;
    esac
done
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

if [[ -z "$PORT" ]]; then
    if [[ -f "$DIR/port" ]]; then PORT="$(cat "$DIR/port")"; else PORT=4061; fi
fi
if [[ -z "$CERTS" && -f "$DIR/certs-dir" ]]; then CERTS="$(cat "$DIR/certs-dir")"; fi
if [[ -n "$CERTS" ]]; then
    mkdir -p "$CERTS"
    CERTS="$(cd "$CERTS" && pwd)"
    PROTO=ssl
else
    PROTO=tcp
fi
LOCATOR="IceGrid/Locator:$PROTO -h 127.0.0.1 -p $PORT"
PYTHON="${ICECRAWLER_PYTHON:-$REPO/.venv/bin/python}"  # the interpreter the servers run with

# Make NAME's certificate in $CERTS unless it exists (the CA first).
cert() {
    [[ -f "$CERTS/ca.pem" ]] || "$PYTHON" -m icecrawler_cli certs init --dir "$CERTS" >/dev/null
    [[ -f "$CERTS/$1.pem" ]] || "$PYTHON" -m icecrawler_cli certs issue "$1" --dir "$CERTS" --ip 127.0.0.1 --role client >/dev/null
}

# Ice 3.7 IceSSL plug-in arguments for a process holding NAME's certificate (nothing in tcp mode).
ssl_args() {
    [[ -n "$CERTS" ]] || return 0
    cert "$1"
    printf '%s\n' --Ice.Plugin.IceSSL=IceSSL:createIceSSL "--IceSSL.DefaultDir=$CERTS" --IceSSL.CAs=ca.pem \
        "--IceSSL.CertFile=$1.pem" "--IceSSL.KeyFile=$1-key.pem" --IceSSL.VerifyPeer=2 \
        --IceSSL.TrustOnly.Server=O=icecrawler
}

admin() {
    local args
    mapfile -t args < <(ssl_args admin)
    icegridadmin --Ice.Config="$HERE/admin.conf" "--Ice.Default.Locator=$LOCATOR" "${args[@]+"${args[@]}"}" -e "$*"
}

# Wait until `admin "$1"` succeeds, at most $2 seconds.
wait_admin() {
    local deadline=$((SECONDS + $2))
    until admin "$1" >/dev/null 2>&1; do
        (( SECONDS < deadline )) || return 1
        sleep 0.3
    done
}

start_node() {
    local name="$1"
    [[ -f "$DIR/$name.pid" ]] && kill -0 "$(cat "$DIR/$name.pid")" 2>/dev/null && die "$name is already running"
    mkdir -p "$DIR/$name/data" "$DIR/$name/output"
    local args
    mapfile -t args < <(ssl_args "$name")
    setsid icegridnode --Ice.Config="$HERE/node.conf" "${args[@]+"${args[@]}"}" \
        "--Ice.Default.Locator=$LOCATOR" \
        "--IceGrid.Node.Name=$name" \
        "--IceGrid.Node.Endpoints=$PROTO -h 127.0.0.1" \
        "--IceGrid.Node.Data=$DIR/$name/data" \
        "--IceGrid.Node.Output=$DIR/$name/output" \
        --IceGrid.Node.CollocateRegistry=0 \
        </dev/null >>"$DIR/$name.log" 2>&1 &
    echo $! >"$DIR/$name.pid"
    echo "$name" >>"$DIR/nodes"
    wait_admin "node ping $name" 30 || die "node $name did not register with the registry (see $DIR/$name.log)"
    echo "node $name up (pid $(cat "$DIR/$name.pid"))"
}

case "$ACTION" in
    up)
        command -v icegridregistry >/dev/null || die "icegridregistry not found (apt-get install zeroc-icegrid)"
        command -v icegridadmin >/dev/null || die "icegridadmin not found (apt-get install zeroc-ice-utils)"
        [[ -f "$DIR/registry.pid" ]] && kill -0 "$(cat "$DIR/registry.pid")" 2>/dev/null \
            && die "a registry already runs for $DIR (grid.sh down -d $DIR)"
        rm -f "$DIR/nodes" "$DIR/certs-dir"
        echo "$PORT" >"$DIR/port"
        [[ -n "$CERTS" ]] && echo "$CERTS" >"$DIR/certs-dir"
        mkdir -p "$DIR/registry"
        mapfile -t args < <(ssl_args registry)
        setsid icegridregistry --Ice.Config="$HERE/registry.conf" "${args[@]+"${args[@]}"}" \
            "--IceGrid.Registry.Client.Endpoints=$PROTO -h 127.0.0.1 -p $PORT" \
            "--IceGrid.Registry.Server.Endpoints=$PROTO -h 127.0.0.1" \
            "--IceGrid.Registry.Internal.Endpoints=$PROTO -h 127.0.0.1" \
            "--IceGrid.Registry.LMDB.Path=$DIR/registry" \
            --IceGrid.Registry.LMDB.MapSize=64 \
            </dev/null >>"$DIR/registry.log" 2>&1 &
        echo $! >"$DIR/registry.pid"
        wait_admin "registry ping Master" 30 || die "registry did not answer on port $PORT (see $DIR/registry.log)"
        echo "registry up on $PROTO 127.0.0.1:$PORT (pid $(cat "$DIR/registry.pid"))"
        for i in $(seq 1 "$NODES"); do start_node "node$i"; done
        echo "Ice.Default.Locator=$LOCATOR"
        ;;
    node)
        [[ $# -eq 1 ]] || usage
        start_node "$1"
        ;;
    admin)
        admin "$@"
        ;;
    deploy)
        # Local defaults: this checkout's interpreter, servers on loopback, state under $DIR/work.
        mkdir -p "$DIR/work"
        tls=""
        if [[ -n "$CERTS" ]]; then
            cert node
            tls="protocol=ssl ssl_ca=\"$CERTS/ca.pem\" ssl_cert=\"$CERTS/node.pem\" ssl_key=\"$CERTS/node-key.pem\""
        fi
        admin "application add \"$HERE/icecrawler.xml\" python=\"$PYTHON\" workdir=\"$DIR/work\"" \
              "host=127.0.0.1 $tls $*"
        ;;
    down)
        pids=()
        if [[ -f "$DIR/nodes" ]]; then
            while read -r name; do
                [[ -f "$DIR/$name.pid" ]] && pids+=("$(cat "$DIR/$name.pid")")
            done <"$DIR/nodes"
        fi
        # Nodes first (each stops its servers), then the registry.
        for pid in "${pids[@]+"${pids[@]}"}"; do kill -TERM "$pid" 2>/dev/null || true; done
        deadline=$((SECONDS + 15))
        for pid in "${pids[@]+"${pids[@]}"}"; do
            while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
            kill -KILL "$pid" 2>/dev/null || true
        done
        if [[ -f "$DIR/registry.pid" ]]; then
            pid="$(cat "$DIR/registry.pid")"
            kill -TERM "$pid" 2>/dev/null || true
            deadline=$((SECONDS + 15))
            while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$DIR"/*.pid "$DIR/nodes" "$DIR/certs-dir"
        echo "grid in $DIR is down"
        ;;
    *) usage ;;
esac
