#!/usr/bin/env bash
# Runs the whole test command (tests/run-all.sh) N times in a row and prints one line per run, to catch flaky
# tests before CI does. With --hog, every run competes with one busy loop per core, as on a loaded CI machine.
#
#   tests/repeat.sh 10           # ten runs
#   tests/repeat.sh 1 --hog      # one run with both cores busy
#
# Logs: $TRAINWARDEN_REPEAT_LOGS (default /tmp/trainwarden-repeat)/run-<i>.log. Exits 1 if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:?usage: tests/repeat.sh N [--hog]}"
hog="${2:-}"
logs="${TRAINWARDEN_REPEAT_LOGS:-/tmp/trainwarden-repeat}"
mkdir -p "$logs"

hogs=()
stop_hogs() {
  ((${#hogs[@]} == 0)) || kill "${hogs[@]}" 2>/dev/null || true
  hogs=()
}
trap stop_hogs EXIT

failed=0
for ((i = 1; i <= runs; i++)); do
  if [[ "$hog" == --hog ]]; then
    # Plain busy loops (no stress-ng needed): one per core, at normal priority.
    for ((c = 0; c < $(nproc); c++)); do
      bash -c 'while :; do :; done' &
      hogs+=("$!")
    done
  fi
  start=$SECONDS
  if CI=true tests/run-all.sh >"$logs/run-$i.log" 2>&1; then result=passed; else result=FAILED; failed=1; fi
  stop_hogs
  # cargo test's summary lines: "test result: ok. N passed; M failed; ...".
  totals="$(grep -E '^test result:' "$logs/run-$i.log" |
    awk '{p += $4; f += $6} END {printf "%d passed, %d failed", p, f}')"
  printf 'run %d/%d %s in %ds%s: %s (log %s)\n' "$i" "$runs" "$result" $((SECONDS - start)) \
    "${hog:+ with $(nproc) busy loops}" "$totals" "$logs/run-$i.log"
done
exit "$failed"
