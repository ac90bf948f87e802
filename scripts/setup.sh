#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: a virtualenv with Engram and the given extras.
#   scripts/setup.sh local            -> what `engram serve` needs
#   scripts/setup.sh test             -> everything the test suite needs (Python extras, CDK CLI, browser)
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-local}"
PYTHON="${PYTHON:-python3}"
VENV="${ENGRAM_VENV:-.venv}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi

case "$MODE" in
  local) EXTRAS="local" ;;
  test)  EXTRAS="dev,local,aws,infra,browser" ;;
  *) echo "usage: scripts/setup.sh [local|test]" >&2; exit 2 ;;
esac

# Reinstall only when pyproject.toml changed since the last install of these extras.
STAMP="$VENV/.engram-$MODE.stamp"
WANT="$(sha256sum pyproject.toml | cut -c1-16)-$EXTRAS"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "==> installing Engram with extras [$EXTRAS]"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e ".[$EXTRAS]"
  echo "$WANT" > "$STAMP"
fi

if [ "$MODE" = "test" ]; then
  if [ -f package.json ]; then
    if [ ! -x node_modules/.bin/cdk ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
      echo "==> installing the CDK CLI (npm ci)"
      npm ci --no-audit --no-fund --loglevel=error
    fi
  fi
  if [ -x scripts/install-browser.sh ]; then
    scripts/install-browser.sh
  fi
fi
