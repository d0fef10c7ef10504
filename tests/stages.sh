# shellcheck shell=bash
# Stages of tests/run-all.sh (sourced): each stage prints a line when it starts and when it ends, with the
# seconds since the run started,
#   [stage +  123s] start cargo-build
#   [stage +  456s] done  cargo-build 333s cpu 610s
#   [stage +  456s] FAILED cluster-tools 120s cpu 200s (exit 1)
# (also kept in $STAGE_DIR/marks.log) and appends "name<TAB>start<TAB>end<TAB>exit<TAB>cpu" to $STAGE_DIR/stages.tsv.
# The CPU seconds say what a stage costs whatever else runs beside it: on two idle cores it needs at least half
# of them in wall time.
# tests/stage-times.sh prints the table from such lines (run-all.sh prints it at the end).
#
#   stage NAME CMD...                    runs CMD in the foreground
#   bg_stage NAME NICE AFTER CMD...      runs CMD in the background, in a process group of its own, at niceness
#                                        NICE, once the stages AFTER (comma-separated, or -) have passed;
#                                        its output goes to $STAGE_DIR/NAME.log
#   bg_wait NAME...                      waits for background stages, prints their logs; fails if one failed
#   bg_kill_all                          stops every background stage still running (the caller's EXIT trap),
#                                        but waits for those named in BG_WAIT_ON_EXIT
#   bg_print_failed                      prints the logs of failed background stages nobody waited for

STAGE_T0="${STAGE_T0:-$(date +%s)}"
declare -A BG_PIDS=()

stage_mark() {
  local line
  line="$(printf '[stage +%5ds] %s' "$(($(date +%s) - STAGE_T0))" "$*")"
  printf '%s\n' "$line" >&2
  printf '%s\n' "$line" >>"$STAGE_DIR/marks.log"
}

stage_record() {
  printf '%s\t%d\t%d\t%d\t%s\n' "$1" "$(($2 - STAGE_T0))" "$(($3 - STAGE_T0))" "$4" "$5" >>"$STAGE_DIR/stages.tsv"
}

# CPU seconds (user + system) of the processes this (sub)shell has waited for, from `times`' second line. Work done
# by daemons (dockerd's image builds, the cluster's processes) is not in it.
children_cpu() { times | awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%d", t + 0.5 }'; }

stage() {
  local name="$1" s rc=0 e cpu
  shift
  s="$(date +%s)"
  stage_mark "start $name"
  # In a subshell, so that `times` counts this stage's processes only.
  ("$@" || rc=$?; children_cpu >"$STAGE_DIR/$name.cpu"; exit "$rc") || rc=$?
  e="$(date +%s)"
  cpu="$(cat "$STAGE_DIR/$name.cpu" 2>/dev/null || echo "?")"
  stage_record "$name" "$s" "$e" "$rc" "$cpu"
  echo "$rc" >"$STAGE_DIR/$name.rc"
  if ((rc)); then
    stage_mark "FAILED $name $((e - s))s cpu ${cpu}s (exit $rc)"
    return "$rc"
  fi
  stage_mark "done  $name $((e - s))s cpu ${cpu}s"
}

bg_stage() {
  local name="$1" nice="$2" after="$3"
  shift 3
  (
    trap - EXIT
    trap 'exit 143' TERM
    dep=""
    if [[ "$after" != - ]]; then
      for dep in ${after//,/ }; do
        until [[ -f "$STAGE_DIR/$dep.rc" ]]; do sleep 1; done
        if [[ "$(cat "$STAGE_DIR/$dep.rc")" != 0 ]]; then
          stage_mark "skip  $name: $dep failed"
          echo 1 >"$STAGE_DIR/$name.rc"
          exit 1
        fi
      done
    fi
    s="$(date +%s)"
    stage_mark "start $name (background, nice $nice)"
    rc=0
    # setsid: a process group of its own, so bg_kill_all stops the whole tree.
    setsid nice -n "$nice" "$@" >"$STAGE_DIR/$name.log" 2>&1 </dev/null &
    echo "$!" >"$STAGE_DIR/$name.pid"
    wait "$!" || rc=$?
    e="$(date +%s)"
    cpu="$(children_cpu)"
    stage_record "$name" "$s" "$e" "$rc" "$cpu"
    if ((rc)); then stage_mark "FAILED $name $((e - s))s cpu ${cpu}s (exit $rc)"; else stage_mark "done  $name $((e - s))s cpu ${cpu}s"; fi
    echo "$rc" >"$STAGE_DIR/$name.rc"
    exit "$rc"
  ) &
  BG_PIDS[$name]=$!
}

bg_wait() {
  local name rc failed=0
  for name in "$@"; do
    rc=0
    wait "${BG_PIDS[$name]}" || rc=$?
    unset "BG_PIDS[$name]"
    bg_print_log "$name"
    ((rc == 0)) || failed=1
  done
  return "$failed"
}

bg_print_log() {
  local name="$1"
  [[ -s "$STAGE_DIR/$name.log" && ! -e "$STAGE_DIR/$name.printed" ]] || return 0
  printf '%s\n' "---- $name (background stage) ----" >&2
  cat "$STAGE_DIR/$name.log" >&2
  printf '%s\n' "---- end of $name ----" >&2
  : >"$STAGE_DIR/$name.printed"
}

# The logs of background stages that failed and were not waited for (a run that stopped early).
bg_print_failed() {
  local rc name
  for rc in "$STAGE_DIR"/*.rc; do
    [[ -e "$rc" && "$(cat "$rc")" != 0 ]] || continue
    name="$(basename "$rc" .rc)"
    bg_print_log "$name"
  done
}

bg_kill_all() {
  local name pid
  for name in "${!BG_PIDS[@]}"; do
    [[ -f "$STAGE_DIR/$name.rc" ]] && continue
    # Stages that must not be cut short (an apt-get install killed halfway leaves dpkg to be repaired by hand).
    if [[ " ${BG_WAIT_ON_EXIT:-} " == *" $name "* ]]; then
      stage_mark "waiting for $name to finish before stopping"
      wait "${BG_PIDS[$name]}" 2>/dev/null || true
      continue
    fi
    if [[ -f "$STAGE_DIR/$name.pid" ]]; then
      pid="$(cat "$STAGE_DIR/$name.pid")"
      # The stage's own process group (setsid above); its scripts' EXIT traps remove their temp dirs.
      kill -TERM -- "-$pid" 2>/dev/null || true
    fi
    kill -TERM "${BG_PIDS[$name]}" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}
