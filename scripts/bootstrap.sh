#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian/Ubuntu machine: system packages, a Python 3.12 venv in .venv, the
# project and its dev tools. A second run only checks and returns in a few seconds.
#   scripts/bootstrap.sh          # what `make demo` / `make test` call first
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(g++ make libssl-dev libbz2-dev libdb5.3-dev zeroc-icegrid zeroc-ice-utils iproute2 openjdk-17-jre-headless maven)
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
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
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

if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  .venv/bin/python -m pip install -q --upgrade pip setuptools wheel
  if ! .venv/bin/python -c 'import Ice' 2>/dev/null; then
    echo "bootstrap: building zeroc-ice 3.8 from source (about 9-16 minutes once; pip caches the wheel)"
    CFLAGS="-g0" CXXFLAGS="-g0" .venv/bin/python -m pip install -q "zeroc-ice>=3.8.3,<3.9"
  fi
  .venv/bin/python -m pip install -q -e ".[dev]"
  touch "$STAMP"
fi
