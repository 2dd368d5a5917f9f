#!/usr/bin/env bash
# `make constraints`: move .venv to the newest releases pyproject.toml's ranges allow, then write their exact
# versions to scripts/constraints.txt, the pins scripts/bootstrap.sh installs. Run `make check` and `make test`
# after it and commit the file with whatever the new releases needed.
#   scripts/refresh_constraints.sh          # rewrites scripts/constraints.txt
#   scripts/refresh_constraints.sh --write  # only writes the file from what .venv holds now
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=scripts/constraints.txt
PIP=(.venv/bin/python -m pip)

if [ "${1:-}" != --write ]; then
  # Ice stays at the version bootstrap.sh built (its wheel is compiled here, not taken from PyPI).
  ice=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("zeroc-ice"))')
  echo "refresh_constraints: upgrading .venv to the newest allowed releases (zeroc-ice stays at $ice)"
  "${PIP[@]}" install -q --upgrade --upgrade-strategy eager -c <(echo "zeroc-ice==$ice") \
    -e ".[dev,bench,demo]" setuptools wheel
fi

{
  cat <<'HEADER'
# The exact versions scripts/bootstrap.sh installs into .venv (pip's -c): the set `make check`, `make test` and the
# CI last passed with. pyproject.toml keeps ranges for people who install the package; the development and CI
# virtualenv takes these pins, so a new release of ruff, mypy, pytest or a library cannot turn a clean checkout's CI
# red without a commit here. To move to newer releases: `make constraints` (scripts/refresh_constraints.sh), then
# `make check` and `make test`, and commit this file with what they needed. zeroc-ice is not listed: bootstrap.sh
# builds the version it names from source.
HEADER
  # Only what the project's extras pull in: a tool installed into .venv by hand (coverage, say) is left out.
  "${PIP[@]}" freeze --exclude-editable --all 2>/dev/null \
    | grep -v -i -E '^(zeroc-ice|pip)( |=)' \
    | .venv/bin/python scripts/required_only.py
} >"$OUT.tmp"
if cmp -s "$OUT.tmp" "$OUT"; then
  # Left untouched, so the next `make setup` does not install again for nothing.
  rm "$OUT.tmp"
  echo "refresh_constraints: $OUT is current ($(grep -c '==' "$OUT") pins)"
else
  mv "$OUT.tmp" "$OUT"
  echo "refresh_constraints: wrote $OUT ($(grep -c '==' "$OUT") pins); run make check and make test, then commit it"
fi
