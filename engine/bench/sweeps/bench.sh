#!/usr/bin/env bash
# The cohort detectors' cost per report as a sweep grows: `trainwarden replay` (release, whole process, as a
# user runs it) on three sweeps of the same 100,000 reports — 10 trials × 10,000 steps, 100 × 1,000 and
# 1,000 × 100, each in 10 waves (bench_stream.py) — with median_stop, percentile and successive_halving, and
# the per-job non_finite detector on the same streams as the baseline measured in the same run. CPU time
# (user + sys) and peak RSS from /usr/bin/time, the median of RUNS alternated runs.
# Usage: engine/bench/sweeps/bench.sh [RUNS]   (default 3)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
runs="${1:-3}"
(cd "$root" && cargo build --release -q -p trainwarden)
bin="${CARGO_TARGET_DIR:-$root/target}/release/trainwarden"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-sweep-bench.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
shapes=("10 10000" "100 1000" "1000 100")
for shape in "${shapes[@]}"; do
  read -r trials steps <<<"$shape"
  python3 "$here/bench_stream.py" "$tmp/sweep-$trials.jsonl" "$trials" "$steps" 10
done
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-20s %-8s %10s %10s %10s %9s\n' detector trials "cpu s" "wall s" "ns/report" "rss MiB"
for shape in "${shapes[@]}"; do
  read -r trials steps <<<"$shape"
  stream="$tmp/sweep-$trials.jsonl"
  reports=$((trials * steps))
  declare -A cpu=() wall=() rss=()
  for ((r = 0; r < runs; r++)); do
    for d in non_finite median_stop percentile successive_halving; do
      out="$( { /usr/bin/time -f '%e %U %S %M' "$bin" replay --shards 1 --output json \
        --policy "$here/bench-$d.yaml" "$stream" >/dev/null; } 2>&1 | tail -1)"
      read -r w u s m <<<"$out"
      cpu[$d]+="$(echo "$u + $s" | bc) "
      wall[$d]+="$w "
      rss[$d]+="$m "
    done
  done
  median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  base="$(echo "${cpu[non_finite]}" | median)"
  for d in non_finite median_stop percentile successive_halving; do
    c="$(echo "${cpu[$d]}" | median)"
    printf '%-20s %-8s %10s %10s %10.0f %9.1f   (%.2fx the baseline)\n' "$d" "$trials" "$c" \
      "$(echo "${wall[$d]}" | median)" "$(echo "$c * 1000000000 / $reports" | bc -l)" \
      "$(echo "$(echo "${rss[$d]}" | median) / 1024" | bc -l)" "$(echo "$c / $base" | bc -l)"
  done
done
