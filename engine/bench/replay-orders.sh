#!/usr/bin/env bash
# `trainwarden replay` as a user runs it, whole process, on the peer stream in three layouts — sorted, in job
# order within each 30 s round (disordered), and that split over 4 files (merged) — on 1 and 2 evaluator
# shards, against the typed decode floor of the same file; wall and CPU time (user+sys) and peak RSS from
# /usr/bin/time, RUNS alternated rounds. Checks that every layout and shard count prints the same bytes.
# Usage: engine/bench/replay-orders.sh [RUNS] [JOBS] [SAMPLES] (default 3 2000 500). The streams are
# deterministic (peer_stream: each job's generator is seeded from its number) and deleted at the end.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
runs="${1:-3}" jobs="${2:-2000}" samples="${3:-500}"
cd "$root"
cargo build --release -q -p trainwarden -p trainwarden-bench
target="${CARGO_TARGET_DIR:-$root/target}/release"
dir="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-orders.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
"$target/peer_stream" "$dir/sorted.jsonl" "$jobs" "$samples"
"$target/peer_stream" "$dir/jobs.jsonl" "$jobs" "$samples" --order jobs-in-round
"$target/peer_stream" "$dir/split.jsonl" "$jobs" "$samples" --order jobs-in-round --files 4
split=("$dir"/split.?.jsonl)
measure() { # NAME OUT COMMAND...: one line "NAME wall cpu rss_kb"
  local name="$1" out="$2"; shift 2
  /usr/bin/time -f "$name %e %U %S %M" -o "$dir/t" "$@" > "$out" 2> "$dir/stderr"
  awk '{printf "%-34s wall %5.2f s  cpu %5.2f s  rss %6.1f MiB\n", $1, $2, $3 + $4, $5 / 1024}' "$dir/t"
}
for policy in ray-plateau five-rules; do
  p="$here/peers/$policy.yaml"
  echo "== $policy, $((jobs * samples)) lines; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  for r in $(seq "$runs"); do
    for shards in 1 2; do
      measure "$policy/sorted/shards=$shards" "$dir/out.sorted.$shards" \
        "$target/trainwarden" replay --policy "$p" --output json --shards "$shards" "$dir/sorted.jsonl"
      measure "$policy/disordered/shards=$shards" "$dir/out.jobs.$shards" \
        "$target/trainwarden" replay --policy "$p" --output json --shards "$shards" "$dir/jobs.jsonl"
      measure "$policy/4-files/shards=$shards" "$dir/out.split.$shards" \
        "$target/trainwarden" replay --policy "$p" --output json --shards "$shards" "${split[@]}"
    done
    measure "decode-floor-typed/disordered" /dev/null "$target/decode_floor" --typed "$dir/jobs.jsonl"
    measure "decode-floor-typed/sorted" /dev/null "$target/decode_floor" --typed "$dir/sorted.jsonl"
  done
  # The same bytes: one file sorted or not, one shard or two. Four files merge the lines of one second by
  # file, not by job, so a timer due on a second runs after another job's line than in one file (see
  # Replay::feed): the same number of events and intents, a few reasons worded at another sample.
  cmp "$dir/out.sorted.1" "$dir/out.jobs.1"
  cmp "$dir/out.sorted.1" "$dir/out.sorted.2"
  cmp "$dir/out.jobs.1" "$dir/out.jobs.2"
  cmp "$dir/out.split.1" "$dir/out.split.2"
  [[ $(wc -l < "$dir/out.sorted.1") == $(wc -l < "$dir/out.split.1") ]]
  summary() { tail -1 "$1" | grep -o '"intents":{[^}]*}'; }
  [[ $(summary "$dir/out.sorted.1") == $(summary "$dir/out.split.1") ]]
  echo "outputs: identical across layouts and shard counts ($(tail -1 "$dir/out.sorted.1" | cut -c1-160)...)"
done
