#!/usr/bin/env bash
# Prints the stage table of a test run: from the `[stage +Ns] start|done|FAILED NAME` lines that tests/run-all.sh
# (tests/stages.sh) writes, in a log file or on stdin. Stages run concurrently, so each row says when the stage
# started and ended (minutes:seconds since the run started), not only how long it took, and the CPU time its
# processes used (user + system; image builds run inside dockerd and the cluster's daemons are not counted).
#
#   tests/stage-times.sh run.log
#   CI=true .ci/run 2>&1 | tee run.log; tests/stage-times.sh run.log
set -euo pipefail

awk '
  function mmss(s) { return sprintf("%d:%02d", int(s / 60), s % 60) }
  match($0, /^\[stage \+ *[0-9]+s\] (start|done |FAILED|skip ) /) {
    t = $0; sub(/^\[stage \+ */, "", t); sub(/s\].*/, "", t); t = t + 0
    rest = substr($0, RSTART + RLENGTH)
    split(rest, w, /[ :]/)
    name = w[1]
    if ($0 ~ /\] start /) { if (!(name in start)) { order[++n] = name; start[name] = t } }
    else if ($0 ~ /\] done /) { end[name] = t; state[name] = "ok" }
    else if ($0 ~ /\] FAILED /) { end[name] = t; state[name] = "FAILED" }
    else { if (!(name in start)) { order[++n] = name; start[name] = t }; end[name] = t; state[name] = "skipped" }
    if (match(rest, /cpu [0-9]+s/)) { cpu[name] = substr(rest, RSTART + 4, RLENGTH - 5); total += cpu[name] }
    if (t > last) last = t
  }
  END {
    if (n == 0) { print "no [stage] lines found" > "/dev/stderr"; exit 1 }
    printf "%-16s %7s %7s %7s %7s  %s\n", "stage", "start", "end", "took", "cpu", ""
    for (i = 1; i <= n; i++) {
      s = order[i]
      e = (s in end) ? end[s] : ""
      printf "%-16s %7s %7s %7s %7s  %s\n", s, mmss(start[s]), (e == "" ? "-" : mmss(e)),
        (e == "" ? "stopped" : mmss(e - start[s])), (s in cpu) ? mmss(cpu[s]) : "-",
        (s in state) ? (state[s] == "ok" ? "" : state[s]) : ""
    }
    printf "%-16s %7s %7s %7s %7s\n", "whole run", "0:00", mmss(last), mmss(last), mmss(total)
  }
' "${1:-/dev/stdin}"
