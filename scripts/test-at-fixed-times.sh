#!/usr/bin/env bash
# The unit and contract suites once more at fixed moments that catch time bombs (docs/ARCHITECTURE.md,
# "One clock"): a test or a store that reads the wall clock where it should read the injected Clock,
# or builds "today 09:00", fails here the day it is written instead of at some hour of some day.
#
#   scripts/test-at-fixed-times.sh            all moments below
#   scripts/test-at-fixed-times.sh 2          only the second one (1-based), e.g. to reproduce a failure
#   ENGRAM_FAKED_TESTS="tests/unit/x.py" ...  other test paths (default: tests/unit tests/contract)
#
# Each run is Debian's `faketime` (libfaketime, scripts/install-faketime.sh) with an offset, so the
# clock starts at the moment and runs on, and child processes share it. The process time zone (TZ)
# and Engram's configured time zone (ENGRAM_TIMEZONE) are set per moment. libfaketime shifts the
# monotonic clock too: leaving it alone (FAKETIME_DONT_FAKE_MONOTONIC=1) makes every time.sleep fail
# with EINVAL in libfaketime 0.9.10. Shifted, it is not shifted for sem_clockwait, so a lock or event
# wait never times out: a test whose point is such a timeout is marked `real_monotonic` and skipped
# here (tests/conftest.py).
# Exit status: 0 when every run passed, 1 when any failed or collected nothing (pytest's 5), 0 with a
# loud message when faketime is missing outside CI.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${ENGRAM_VENV:-.venv}/bin/python"

# moment (UTC) | TZ and ENGRAM_TIMEZONE | why
MOMENTS=(
  "2026-12-31 23:30:00|UTC|23:30 UTC on the last day of a month and of a year"
  "2027-01-01 00:30:00|UTC|00:30 UTC on the first day after"
  "2026-03-29 01:30:00|Europe/Berlin|30 min after Berlin's clocks jumped from 02:00 to 03:00 (CET -> CEST)"
  "2026-11-01 05:30:00|America/New_York|01:30 EDT in New York, the first pass of the hour repeated at the fall-back"
)

require() {
  [ -n "${CI:-}" ] || [ -n "${ENGRAM_REQUIRE_FAKETIME:-}" ]
}

if ! command -v faketime >/dev/null 2>&1; then
  if require; then
    echo "faked-time runs: faketime is not installed and CI needs it (scripts/install-faketime.sh)" >&2
    exit 1
  fi
  echo "!!! faked-time runs SKIPPED: faketime is not installed (scripts/install-faketime.sh, or apt-get install faketime)" >&2
  exit 0
fi

faked() {  # faked "<UTC moment>" <zone> command... : run the command with the clock at the moment
  local moment="$1" zone="$2"
  shift 2
  local offset
  offset=$(($(date -u -d "$moment" +%s) - $(date -u +%s)))
  [ "$offset" -ge 0 ] && offset="+$offset"
  TZ="$zone" ENGRAM_TIMEZONE="$zone" faketime -f "$offset" "$@"
}

# libfaketime must take effect in this Python: datetime.now and time.time, in the zone asked for,
# with time.sleep still working.
probe=$(faked "2026-12-31 23:30:00" "Europe/Berlin" "$PY" -c '
import datetime, time
time.sleep(0.01)
utc = datetime.datetime.now(datetime.UTC)
local = datetime.datetime.fromtimestamp(time.time()).astimezone()
print(utc.strftime("%Y-%m-%d %H:%M"), local.strftime("%Y-%m-%d %H:%M %Z"))
' 2>&1)
if [ "$probe" != "2026-12-31 23:30 2027-01-01 00:30 CET" ]; then
  echo "faked-time runs: libfaketime does not take effect in $PY (got: $probe)" >&2
  exit 1
fi

read -r -a TESTS <<< "${ENGRAM_FAKED_TESTS:-tests/unit tests/contract}"
failed=0
summary=()
index=0
for entry in "${MOMENTS[@]}"; do
  index=$((index + 1))
  if [ $# -gt 0 ] && [ "$1" != "$index" ]; then
    continue
  fi
  IFS="|" read -r moment zone why <<< "$entry"
  echo "==> faked time $index: $moment UTC, TZ=$zone ($why)"
  started=$(date +%s)
  faked "$moment" "$zone" "$PY" -m pytest "${TESTS[@]}" -m "not slow and not aws" -q -p no:cacheprovider
  rc=$?
  took=$(($(date +%s) - started))
  if [ "$rc" -eq 0 ]; then
    result="passed"
  else
    [ "$rc" -eq 5 ] && result="FAILED (no tests collected)" || result="FAILED (pytest exit $rc)"
    failed=1
  fi
  summary+=("$moment UTC, $zone: $result in ${took}s")
done

echo "==> faked-time runs:"
printf '    %s\n' "${summary[@]}"
exit "$failed"
