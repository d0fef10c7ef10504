# Free-disk checks before work that fills the disk, shared by the build scripts and cluster.sh (sourced; the
# caller defines `die`). One copy, so every script words a full disk the same way.

# free_kib PATH: free KiB on the filesystem holding PATH (walks up to the nearest existing parent).
free_kib() {
  local p="$1"
  while [[ ! -e "$p" ]]; do p="$(dirname "$p")"; done
  df -Pk "$p" | awk 'NR == 2 {print $4}'
}

# require_free_gib GIB WHY PATH...: dies naming the path when its filesystem has less than GIB GiB free.
# WHY finishes the sentence "only N MiB free on the filesystem of PATH; ...".
require_free_gib() {
  local gib="$1" why="$2" p free
  shift 2
  for p in "$@"; do
    free="$(free_kib "$p")"
    ((free >= gib * 1024 * 1024)) || die "only $((free / 1024)) MiB free on the filesystem of $p; $why"
  done
}
