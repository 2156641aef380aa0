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
#      the spec's noisy_above_pct) run again, at most twice; a run with
#      points still noisy after that never joins the history,
#   4. looks for change points over the last runs kept in the cache (a
#      history of up to TESTBED_CI_KEEP runs, default 20):
#      `testbed history --fail-on-change HISTORY NEW`, and gates the claims
#      on the newest kept run: `testbed check NEW --baseline LAST
#      --rerun-noisy`. Both exit 0 pass, 1 regression, 2 inconclusive,
#      3 error, and so does this job (below). With no history yet, this run
#      is stored as its first run and the job passes.
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
# Exit status, the gates' own codes:
#   0 pass (or the first run stored);
#   1 REGRESSION: this run starts a change the worse way in the history, or
#     a claim that held in the newest kept run no longer holds (a noisy
#     point excuses neither, unless it is still noisy after its reruns):
#     fail the job;
#   2 INCONCLUSIVE: the gates could not decide (a claim that held is now
#     undecided or not measurable, a change or a lost claim on points still
#     noisy after their reruns, noisy points not run again, or no history
#     yet and a busy host): report it as a warning and run the job again
#     on a quiet runner; the run does not join the history;
#   3 infrastructure error: a step failed (install, the kernel build, the
#     run or one of its points, testbed history or check themselves, a
#     history of another experiment): fail the job as broken, not as a
#     regression.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
say() { printf '[testbed-ci] %s\n' "$*" >&2; }
die() {
  say "infrastructure error (exit 3): $*"
  exit 3
}
# Any step that fails unhandled is an infrastructure error, not a verdict.
trap 'say "infrastructure error (exit 3): step ${step_name:-setup} failed (line $LINENO)"; exit 3' ERR

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
  if [ -n "$step_name" ]; then
    TIMES+=("$(printf '%-8s %4d s' "$step_name" $((SECONDS - step_start)))")
  fi
  step_name=""
}
report_times() {
  local rc=$?
  trap - ERR
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
# most twice); what stays noisy keeps the run out of the history, and a gate
# it fails on those points alone is inconclusive.
"$TESTBED" run "$RUN_SPEC" --accel "$ACCEL" --out "$NEW" --rerun-noisy || {
  rc=$?
  say "infrastructure error (exit 3): the run failed (testbed run exit $rc); its files are in $NEW"
  exit 3
}
BUSY=$("$TESTBED" show "$NEW" | grep -Eo '[0-9]+ of [0-9]+ points noisy' | head -n1 || true)
case "$BUSY" in
  "" | "0 of "*) BUSY="" ;;
  *) say "this run was measured on a busy host ($BUSY, after rerunning them): it does not join the history" ;;
esac
"$TESTBED" plot "$NEW" >/dev/null || say "(could not draw the figures; the comparison does not need them)"
end

# 4. Change points over the kept runs and this one; the claims gate.
begin history
# The kept runs, oldest first: their names are run-<UTC time>.
kept() { find "$HISTORY" -mindepth 2 -maxdepth 2 -name manifest.json -printf '%h\n' 2>/dev/null | sort || true; }
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
    say "INCONCLUSIVE (exit 2): no history at $HISTORY, and this run was measured on a busy host: not stored as its first run; run the job again on a quiet runner"
    exit 2
  fi
  store_run
  say "no history at $HISTORY: stored this run as its first; nothing to compare, the job passes"
  exit 0
fi
LAST=${KEPT[-1]}
# What a gate's exit code says, for the job's log.
verdict() {
  case "$1" in
    0) echo pass ;;
    1) echo REGRESSION ;;
    2) echo INCONCLUSIVE ;;
    *) echo "error (exit $1)" ;;
  esac
}
say "testbed history --fail-on-change $HISTORY (${#KEPT[@]} runs) $NEW"
history_rc=0
"$TESTBED" history --fail-on-change "$HISTORY" "$NEW" 2>"$OUT/history.err" | tee "$OUT/history.txt" || history_rc=$?
"$TESTBED" history --json "$HISTORY" "$NEW" >"$OUT/history.json" 2>/dev/null || true
cat "$OUT/history.err" >&2
case "$history_rc" in
  0) ;;
  1) say "REGRESSION: this run starts a new segment the worse way (see above; $OUT/history.txt)" ;;
  2) say "INCONCLUSIVE: the history cannot decide this run (see above; $OUT/history.txt)" ;;
  *)
    if grep -q "a history is of one experiment's runs" "$OUT/history.err"; then
      die "the history $HISTORY is of another experiment: delete it to start a new one"
    fi
    die "testbed history failed (exit $history_rc)"
    ;;
esac
end

begin claims
# --rerun-noisy: the run's noisy points ran again already (above), so this
# boots nothing; it lets a claim lost on points still noisy count as
# inconclusive instead of lost.
say "testbed check $NEW --baseline $LAST --rerun-noisy"
check_rc=0
"$TESTBED" check "$NEW" --baseline "$LAST" --rerun-noisy | tee "$OUT/claims.txt" || check_rc=$?
case "$check_rc" in
  0) ;;
  1) say "REGRESSION: a claim that held in the newest kept run ($LAST) no longer holds (see above; $OUT/claims.txt)" ;;
  2) say "INCONCLUSIVE: the claims gate cannot decide this run (see above; $OUT/claims.txt)" ;;
  *) die "testbed check failed (exit $check_rc)" ;;
esac
end

say "history: $(verdict "$history_rc"), claims: $(verdict "$check_rc")"
if [ "$history_rc" = 1 ] || [ "$check_rc" = 1 ]; then
  say "REGRESSION (exit 1): the job fails; this run does not join the history"
  exit 1
fi
if [ "$history_rc" = 2 ] || [ "$check_rc" = 2 ]; then
  say "INCONCLUSIVE (exit 2): not a failure and not a pass; this run does not join the history$([ -n "$BUSY" ] && echo " (measured on a busy host: $BUSY)"); run the job again on a quiet runner"
  exit 2
fi
if [ -n "$BUSY" ]; then
  say "pass: no regression, though measured on a busy host ($BUSY, each noisy point run again): not stored in the history $HISTORY"
elif [ "$UPDATE" = 1 ]; then
  store_run
  say "no regression; this run joins the history ($HISTORY, up to $KEEP runs)"
else
  say "no regression over the history $HISTORY"
fi
