#!/usr/bin/env bash
# The testbed in your CI: the one script both examples (github-actions.yml,
# gitlab-ci.yml) call. It
#   1. installs the testbed from the checkout it lives in (Debian packages
#      from orchestrator/host-tools.txt, then ./x build),
#   2. builds your kernel tree through a `kind = "local-tree"` descriptor
#      (cached in $TESTBED_CACHE by the tree's content: a second run of the
#      same tree builds nothing),
#   3. runs a quick spec against it (under TCG by default),
#   3b. points measured on a busy host (other processes' CPU share above
#      the spec's noisy_above_pct) run again; a run still noisy after that
#      decides nothing: it neither fails the job nor joins the history,
#   4. looks for change points over the last runs kept in the cache (a
#      history of up to TESTBED_CI_KEEP runs, default 20):
#      `testbed history --fail-on-change HISTORY NEW`. When this run starts
#      a new segment the worse way, the job fails (exit 4). The claims are
#      gated on the newest kept run: `testbed check NEW --baseline LAST`
#      (exit 6 when a claim that held there no longer holds). With no
#      history yet, this run is stored as its first run and the job passes.
#
# Knobs (environment variables; see docs/ci/README.md):
#   TESTBED_CI_TREE         your kernel tree: a git checkout or a plain directory
#   TESTBED_CI_KERNEL       or your own descriptor file (kind = "local-tree"); default:
#                           one written to $TESTBED_CI_OUT for TESTBED_CI_TREE
#   TESTBED_CI_FRAGMENTS    config fragments of the written descriptor (default "vm-base")
#   TESTBED_CI_PATCHES      a patch series of kernel-configs/patches/ the written descriptor
#                           applies, to a copy of your tree (default none; e.g. storage-hooks)
#   TESTBED_CI_SPEC         the spec to run (default experiments/smoke.toml)
#   TESTBED_CI_REPETITIONS  repetitions (default 5; a run's value is their median)
#   TESTBED_CI_ACCEL        tcg (default), kvm or auto
#   TESTBED_CACHE           the cache (default ~/.cache/testbed)
#   TESTBED_CI_HISTORY      the kept runs (default $TESTBED_CACHE/ci-history/<spec file name>)
#   TESTBED_CI_KEEP         how many runs the history keeps (default 20; the oldest go)
#   TESTBED_CI_UPDATE_HISTORY  1: a run that passes joins the history (main branch);
#                           TESTBED_CI_UPDATE_BASELINE=1 is read the same way
#   TESTBED_CI_OUT          this job's files: descriptor, spec, run, history.txt, history.json
#                           (default ./testbed-ci-out)
#   TESTBED_CI_INSTALL      needed (default): the packages this job needs; all: ./x setup;
#                           none: install nothing. ./x build runs unless TESTBED_CI_BUILD=0.
#
# Exit status: 0 pass (or first run stored), 4 the newest run starts a
# regression, 5 the history is of another experiment, 6 a claim that held in
# the newest kept run no longer holds, anything else: a step failed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
say() { printf '[testbed-ci] %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

CACHE=${TESTBED_CACHE:-$HOME/.cache/testbed}
export TESTBED_CACHE=$CACHE
SPEC=${TESTBED_CI_SPEC:-$ROOT/experiments/smoke.toml}
REPS=${TESTBED_CI_REPETITIONS:-5}
KEEP=${TESTBED_CI_KEEP:-20}
UPDATE=${TESTBED_CI_UPDATE_HISTORY:-${TESTBED_CI_UPDATE_BASELINE:-0}}
ACCEL=${TESTBED_CI_ACCEL:-tcg}
OUT=${TESTBED_CI_OUT:-$PWD/testbed-ci-out}
INSTALL=${TESTBED_CI_INSTALL:-needed}
FRAGMENTS=${TESTBED_CI_FRAGMENTS:-vm-base}
PATCHES=${TESTBED_CI_PATCHES:-}
[ -f "$SPEC" ] || die "TESTBED_CI_SPEC: no spec at $SPEC"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "TESTBED_CI_REPETITIONS=$REPS is not a positive number"
[[ "$KEEP" =~ ^[1-9][0-9]*$ ]] || die "TESTBED_CI_KEEP=$KEEP is not a positive number"
SPEC=$(realpath "$SPEC")
SPEC_NAME=$(basename "$SPEC" .toml)
HISTORY=${TESTBED_CI_HISTORY:-$CACHE/ci-history/$SPEC_NAME}
mkdir -p "$OUT" "$CACHE"
OUT=$(realpath "$OUT")

# Time by step, printed at the end whatever happens.
declare -a TIMES=()
step_start=0
step_name=""
begin() {
  step_name=$1
  step_start=$SECONDS
  say "== $1"
}
end() {
  [ -n "$step_name" ] && TIMES+=("$(printf '%-8s %4d s' "$step_name" $((SECONDS - step_start)))")
  step_name=""
}
report_times() {
  local rc=$?
  end
  for t in "${TIMES[@]}"; do say "time: $t"; done
  exit $rc
}
trap report_times EXIT

# 1. Install. The packages come from the testbed's own table of host tools:
# every one `./x setup` would install (all), or only those of the steps this
# job runs (needed): building the testbed, booting VMs, building a kernel, and
# git for provenance. A local tree needs no Debian kernel source package.
TABLE=$ROOT/orchestrator/host-tools.txt
packages() {
  awk -v all="$1" '!/^#/ && NF == 3 && $2 !~ /^pip:/ {
    if (all == "1") { print $2; next }
    if ($2 ~ /^linux-source-/) next
    n = split($3, needs, ",")
    for (i = 1; i <= n; i++)
      if (needs[i] ~ /^(build|vm|kernel-build|provenance)$/) { print $2; break }
  }' "$TABLE" | sort -u
}
install_packages() {
  local missing=() p sudo=""
  for p in $(packages 0); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [ "$(id -u)" = 0 ] || sudo=sudo
  say "installing: ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}
begin install
case "$INSTALL" in
  needed) install_packages ;;
  all) "$ROOT/x" setup ;;
  none) ;;
  *) die "TESTBED_CI_INSTALL=$INSTALL (expected needed, all or none)" ;;
esac
if [ "${TESTBED_CI_BUILD:-1}" != 0 ]; then
  "$ROOT/x" build
fi
TRIPLE=$(awk '$1 == "target" { print $2 }' "$ROOT/orchestrator/guest-build.txt")
TESTBED=${CARGO_TARGET_DIR:-$ROOT/target}/$TRIPLE/release/testbed
[ -x "$TESTBED" ] || die "no testbed binary at $TESTBED (run $ROOT/x build)"
# The kernel build and the run check their own tools before they start and
# name any missing one with its package.
end

# 2. The kernel: your descriptor, or one written for your tree.
begin kernel
toml_string() {
  case "$1" in *'"'* | *'\'*) die "path $1 has a quote or backslash; name it in a descriptor of your own (TESTBED_CI_KERNEL)" ;; esac
  printf '"%s"' "$1"
}
if [ -n "${TESTBED_CI_KERNEL:-}" ]; then
  [ -f "$TESTBED_CI_KERNEL" ] || die "TESTBED_CI_KERNEL: no descriptor at $TESTBED_CI_KERNEL"
  KERNEL=$(realpath "$TESTBED_CI_KERNEL")
else
  [ -n "${TESTBED_CI_TREE:-}" ] || die "set TESTBED_CI_TREE (your kernel tree) or TESTBED_CI_KERNEL (a descriptor)"
  [ -d "$TESTBED_CI_TREE" ] || die "TESTBED_CI_TREE: $TESTBED_CI_TREE is not a directory"
  KERNEL=$OUT/ci-kernel.toml
  frags=""
  for f in $FRAGMENTS; do frags+="${frags:+, }$(toml_string "$f")"; done
  cat >"$KERNEL" <<EOF
# Written by docs/ci/testbed-ci.sh for TESTBED_CI_TREE.
kind = "local-tree"

[tree]
path = $(toml_string "$(realpath "$TESTBED_CI_TREE")")

[config]
base = "tinyconfig"
fragments = [$frags]

[modules]
load = []
EOF
  if [ -n "$PATCHES" ]; then
    printf '\n[patches]\nseries = %s\n' "$(toml_string "$PATCHES")" >>"$KERNEL"
  fi
fi
say "kernel descriptor $KERNEL"
KERNEL_OUT=$("$TESTBED" kernel build "$KERNEL")
printf '%s\n' "$KERNEL_OUT"
KEY=$(printf '%s\n' "$KERNEL_OUT" | awk '$1 == "key" { print $2 }')
# One cached kernel per descriptor: the entries of earlier trees of yours
# would only grow the CI cache.
NAME=$(basename "$KERNEL" .toml)
for meta in "$CACHE"/kernels/*/meta.json; do
  [ -f "$meta" ] || continue
  dir=$(dirname "$meta")
  if [ "$(basename "$dir")" != "$KEY" ] && grep -q '"kind": "local-tree"' "$meta" &&
    grep -q "\"name\": \"$NAME\"" "$meta"; then
    say "pruning the cached kernel of an earlier tree: $dir"
    rm -rf "$dir"
  fi
done
end

# 3. The run: the spec with your kernel and the repetitions set.
begin run
RUN_SPEC=$OUT/$SPEC_NAME.toml
awk -v kernel="$(toml_string "$KERNEL")" -v reps="$REPS" '
  BEGIN { want["kernel"] = "name = " kernel; key["kernel"] = "name"
          want["experiment"] = "repetitions = " reps; key["experiment"] = "repetitions" }
  function finish() { if ((sec in want) && !(sec in done)) { print want[sec]; done[sec] = 1 } }
  /^[ \t]*\[/ { finish(); sec = $0; sub(/#.*/, "", sec); gsub(/[\[\] \t]/, "", sec); print; next }
  (sec in key) && $0 ~ "^[ \t]*" key[sec] "[ \t]*=" { print want[sec]; done[sec] = 1; next }
  { print }
  END { finish(); for (s in want) if (!(s in done)) { print "\n[" s "]"; print want[s] } }
' "$SPEC" >"$RUN_SPEC"
"$TESTBED" validate "$RUN_SPEC" >/dev/null || die "the spec with the kernel set does not validate: $RUN_SPEC"
NEW=$OUT/run-$(date -u +%Y%m%dT%H%M%SZ)
say "running $RUN_SPEC ($REPS repetitions, accel $ACCEL) into $NEW"
# Points measured while other processes took the host's CPU run again (at
# most twice); what stays noisy makes the run undecided, never a failure.
"$TESTBED" run "$RUN_SPEC" --accel "$ACCEL" --out "$NEW" --rerun-noisy || {
  rc=$?
  say "the run failed (exit $rc); its files are in $NEW"
  exit $rc
}
BUSY=$("$TESTBED" show "$NEW" | grep -Eo '[0-9]+ of [0-9]+ points noisy' | head -n1 || true)
case "$BUSY" in
  "" | "0 of "*) BUSY="" ;;
  *) say "this run was measured on a busy host ($BUSY, after rerunning them): it decides no regression and does not join the history" ;;
esac
"$TESTBED" plot "$NEW" >/dev/null || say "(could not draw the figures; the comparison does not need them)"
end

# 4. Change points over the kept runs and this one; the claims gate.
begin history
# The kept runs, oldest first: their names are run-<UTC time>.
kept() { find "$HISTORY" -mindepth 2 -maxdepth 2 -name manifest.json -printf '%h\n' 2>/dev/null | sort; }
store_run() {
  mkdir -p "$HISTORY"
  local dest
  dest=$HISTORY/$(basename "$NEW")
  rm -rf "$dest.new"
  cp -a "$NEW" "$dest.new"
  rm -rf "$dest"
  mv "$dest.new" "$dest"
  # The oldest go, so the history (and the CI cache) stays at KEEP runs.
  kept | head -n "-$KEEP" | while read -r old; do
    say "the history keeps $KEEP runs: dropping $old"
    rm -rf "$old"
  done
}
# A copy an interrupted job left half-made is no run of the history.
rm -rf "$HISTORY"/*.new
mapfile -t KEPT < <(kept)
if [ "${#KEPT[@]}" = 0 ]; then
  if [ -n "$BUSY" ]; then
    say "no history at $HISTORY, and this run was measured on a busy host: not stored; nothing to compare, the job passes"
    exit 0
  fi
  store_run
  say "no history at $HISTORY: stored this run as its first; nothing to compare, the job passes"
  exit 0
fi
LAST=${KEPT[-1]}
say "testbed history --fail-on-change $HISTORY (${#KEPT[@]} runs) $NEW"
set +e
"$TESTBED" history --fail-on-change "$HISTORY" "$NEW" 2>"$OUT/history.err" | tee "$OUT/history.txt"
rc=${PIPESTATUS[0]}
"$TESTBED" history --json "$HISTORY" "$NEW" >"$OUT/history.json" 2>/dev/null
set -e
cat "$OUT/history.err" >&2
failed=0
if [ "$rc" = 1 ] && grep -q '^newest run: REGRESSION' "$OUT/history.txt"; then
  say "REGRESSION: this run starts a new segment the worse way (see above; $OUT/history.txt); the job fails"
  failed=4
elif [ "$rc" != 0 ]; then
  if grep -q "a history is of one experiment's runs" "$OUT/history.err"; then
    say "the history $HISTORY is of another experiment: delete it to start a new one"
    exit 5
  fi
  die "testbed history failed (exit $rc)"
fi
end

begin claims
say "testbed check $NEW --baseline $LAST"
set +e
"$TESTBED" check "$NEW" --baseline "$LAST" | tee "$OUT/claims.txt"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" = 1 ] && grep -q '^baseline gate: .*FAILS$' "$OUT/claims.txt"; then
  say "a claim that held in the newest kept run ($LAST) no longer holds; the job fails"
  [ "$failed" != 0 ] || failed=6
elif [ "$rc" != 0 ]; then
  die "testbed check failed (exit $rc)"
fi
[ "$failed" = 0 ] || exit "$failed"
if [ -n "$BUSY" ]; then
  say "measured on a busy host ($BUSY): undecided, not stored in the history $HISTORY"
elif [ "$UPDATE" = 1 ]; then
  store_run
  say "no regression; this run joins the history ($HISTORY, up to $KEEP runs)"
else
  say "no regression over the history $HISTORY"
fi
