#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian/Ubuntu machine: system packages, a Python 3.12 venv in .venv, the
# project and its dev tools. A second run only checks and returns in a few seconds.
#   scripts/bootstrap.sh          # what `make demo` / `make test` call first
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(g++ make libssl-dev libbz2-dev libdb5.3-dev zeroc-icegrid zeroc-ice-utils iproute2 openjdk-17-jre-headless maven prometheus logrotate faketime sqlite3)
# `make check` (ICECRAWLER_SETUP=dev) needs only what builds the venv: no IceGrid, netns tools, JDK, Maven or
# Prometheus.
if [ "${ICECRAWLER_SETUP:-}" = dev ]; then APT_PACKAGES=(g++ make libssl-dev libbz2-dev libdb5.3-dev); fi
STAMP=.venv/.bootstrap-stamp

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
# A JDK from elsewhere (e.g. a pre-installed Temurin) is as good as Debian's.
if command -v java >/dev/null 2>&1; then missing=("${missing[@]/openjdk-17-jre-headless}"); fi
if command -v mvn >/dev/null 2>&1; then missing=("${missing[@]/maven}"); fi
read -r -a missing <<<"${missing[*]:-}"
if ((${#missing[@]})); then
  echo "bootstrap: installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # Debian's prometheus package starts a system Prometheus on :9090 (HBase's Thrift port too) and a node
  # exporter; the tests start their own Prometheus on a free port. Where no policy says otherwise, services are
  # not started by this install (policy-rc.d answers "not now", as in Debian's container images).
  POLICY=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    POLICY=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null && $SUDO chmod +x "$POLICY"
    trap '$SUDO rm -f "$POLICY"' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  if [ -n "$POLICY" ]; then $SUDO rm -f "$POLICY"; trap - EXIT; fi
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
  fi
fi

find_python() {
  for candidate in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      command -v "$candidate"; return 0
    fi
  done
  return 1
}

if [ ! -x .venv/bin/python ]; then
  PY=$(find_python) || { echo "bootstrap: Python 3.12 not found. Install it (pyenv install 3.12, or your distro's python3.12) and re-run." >&2; exit 1; }
  echo "bootstrap: creating .venv with $PY"
  "$PY" -m venv .venv
fi

# zeroc-ice has no Linux wheel for 3.12 on PyPI, so it is built from source once, optimised, into a wheel cached
# under a name that records the build flags. Setuptools REPLACES its C++ flags (-O3 -DNDEBUG) with $CXXFLAGS when
# that is set, so the flags must name the optimisation level: "-g0" alone built Ice at -O0, and every RPC cost
# 4-6x the CPU (docs/BENCHMARKS.md). A venv whose Ice came from another build is reinstalled from this wheel.
ICE_VERSION=3.8.3
ICE_FLAGS="-O2 -g0 -DNDEBUG"
ICE_BUILD="zeroc-ice $ICE_VERSION CXXFLAGS=$ICE_FLAGS"
ICE_WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/icecrawler/wheels/zeroc-ice-$ICE_VERSION-O2"
ICE_STAMP=.venv/.ice-build

install_ice() {
  if [ "$(cat "$ICE_STAMP" 2>/dev/null)" = "$ICE_BUILD" ] && .venv/bin/python -c 'import Ice' 2>/dev/null; then
    return 0
  fi
  if ! ls "$ICE_WHEELS"/zeroc_ice-*.whl >/dev/null 2>&1; then
    local jobs src
    jobs=$(nproc 2>/dev/null || echo 1)
    src=$(mktemp -d)
    echo "bootstrap: building zeroc-ice $ICE_VERSION from source with $ICE_FLAGS on $jobs cores (5-15 minutes, once; cached in $ICE_WHEELS)"
    .venv/bin/python -m pip download -q --no-deps --no-binary :all: -d "$src" "zeroc-ice==$ICE_VERSION"
    tar -xzf "$src"/zeroc_ice-*.tar.gz -C "$src"
    CFLAGS="$ICE_FLAGS" CXXFLAGS="$ICE_FLAGS" .venv/bin/python scripts/build_ice_wheel.py --jobs "$jobs" \
      "$src/zeroc_ice-$ICE_VERSION" "$src/wheel"
    mkdir -p "$ICE_WHEELS"
    # Copied beside its name and renamed within the cache (the build folder may be on another file system): a
    # bootstrap killed mid-copy leaves a .partial that the check above never takes for a built wheel. One command a
    # line: set -e stops at a failed cp (a full disk) only where it is not the left of an &&.
    local wheel
    for wheel in "$src"/wheel/zeroc_ice-*.whl; do
      cp "$wheel" "$ICE_WHEELS/${wheel##*/}.partial"
      sync "$ICE_WHEELS/${wheel##*/}.partial"
      mv -f "$ICE_WHEELS/${wheel##*/}.partial" "$ICE_WHEELS/${wheel##*/}"
    done
    rm -rf "$src"
  fi
  .venv/bin/python -m pip install -q --force-reinstall --no-deps "$ICE_WHEELS"/zeroc_ice-*.whl
  echo "$ICE_BUILD" >"$ICE_STAMP"
}

# Every other package comes at the version scripts/constraints.txt pins (the set the CI last passed with), so a new
# release of a linter or a library cannot change a clean checkout's results; `make constraints` moves the pins.
CONSTRAINTS=scripts/constraints.txt
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ "$CONSTRAINTS" -nt "$STAMP" ] \
  || [ "$(cat "$ICE_STAMP" 2>/dev/null)" != "$ICE_BUILD" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c "$CONSTRAINTS" setuptools wheel
  install_ice
  # dev: tests and linters; bench and demo: what `make bench` and `make demo` need (simhash, matplotlib).
  .venv/bin/python -m pip install -q -c "$CONSTRAINTS" -e ".[dev,bench,demo]"
  touch "$STAMP"
fi
