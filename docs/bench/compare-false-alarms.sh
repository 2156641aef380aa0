#!/usr/bin/env bash
# How often `testbed compare` flags a change that is not there, and the
# smallest real change it finds every time: a benchmark (minutes of VM
# runs), not a CI test.
#
#   docs/bench/compare-false-alarms.sh SPEC [PAIRS] [SLOWDOWNS]
#
# SPEC       a spec whose devices include a null backend with latency_ns
#            (e.g. the one this script writes with --example); its
#            repetitions and boots are what is being judged.
# PAIRS      A/A pairs, each two fresh runs of SPEC (default 10).
# SLOWDOWNS  device slowdowns in percent to detect, e.g. "5 10 20"
#            (default "5 10 20"); each is compared with 3 runs of SPEC.
#
# Prints, per A/A pair, the values compared and flagged, then the
# false-alarm rate (flagged values / values, and pairs with any flag),
# and for each slowdown how many of its comparisons flagged a regression.
# Every run stays under $OUT (default: a new directory under /tmp).
#
# TCG timings are shape-only; under KVM with a real device the rates are
# the ones to quote.
set -euo pipefail

# The release binary ./x build made (set TESTBED to use another).
TESTBED=${TESTBED:-${CARGO_TARGET_DIR:-$HOME/.cache/testbed/cargo-target}/x86_64-unknown-linux-gnu/release/testbed}
[ -x "$TESTBED" ] || { echo "$TESTBED: not built; run ./x build (or set TESTBED)" >&2; exit 2; }
tb() { "$TESTBED" "$@"; }

if [ "${1:-}" = "--example" ]; then
  cat <<'EOF'
[experiment]
name = "smoke"
repetitions = 5
boots = 5
seed = 11

[vm]
vcpus = 2
memory = "512M"

[[devices]]
name = "data"
kind = "nvme"
size = "64M"
backend = "null"
latency_ns = 4000000

[workload]
kind = "randread"
device = "data"
block_size = 512
reads_per_thread = 200
warmup_reads = 10

[sweep]
threads = [1, 2]
EOF
  exit 0
fi

SPEC=${1:?usage: $0 SPEC [PAIRS] [SLOWDOWNS] (or --example for a spec)}
PAIRS=${2:-10}
SLOWDOWNS=${3:-"5 10 20"}
OUT=${OUT:-$(mktemp -d /tmp/compare-false-alarms.XXXXXX)}
mkdir -p "$OUT"
latency=$(sed -n 's/^latency_ns *= *\([0-9]*\).*/\1/p' "$SPEC" | head -1)
[ -n "$latency" ] || { echo "$SPEC: no latency_ns line (a null backend device) to slow down" >&2; exit 2; }

run() { # spec out
  tb run "$1" --out "$2" >"$2.log" 2>&1 || { echo "run $2 failed: see $2.log" >&2; exit 1; }
}
# "N values compared, R regressions" and the flagged rows of one compare.
compare() { # a b -> prints "values flagged regressions"
  local text
  text=$(tb compare "$1" "$2")
  printf '%s\n' "$text" >"$OUT/compare-$(basename "$1")-$(basename "$2").txt"
  local values flagged regressions
  values=$(printf '%s\n' "$text" | sed -n 's/^\([0-9]*\) values compared.*/\1/p')
  flagged=$(printf '%s\n' "$text" | grep -cE '  (REGRESSION|improvement|changed)$' || true)
  regressions=$(printf '%s\n' "$text" | grep -cE '  REGRESSION$' || true)
  echo "$values $flagged $regressions"
}

echo "spec $SPEC, $PAIRS A/A pairs, slowdowns: $SLOWDOWNS %; runs in $OUT"
total_values=0 total_flagged=0 pairs_flagged=0
for i in $(seq 1 "$PAIRS"); do
  run "$SPEC" "$OUT/aa$i-a"
  run "$SPEC" "$OUT/aa$i-b"
  read -r v f r < <(compare "$OUT/aa$i-a" "$OUT/aa$i-b")
  echo "A/A pair $i: $v values, $f flagged ($r regressions)"
  total_values=$((total_values + v)); total_flagged=$((total_flagged + f))
  [ "$f" = 0 ] || pairs_flagged=$((pairs_flagged + 1))
done
echo "false alarms: $total_flagged of $total_values values ($(awk "BEGIN{printf \"%.1f\", 100*$total_flagged/($total_values>0?$total_values:1)}") %), $pairs_flagged of $PAIRS pairs"

smallest=""
for s in $SLOWDOWNS; do
  slow_latency=$(awk "BEGIN{printf \"%d\", $latency*(1+$s/100)}")
  slow="$OUT/slow$s.toml"
  sed "s/^latency_ns *= *$latency/latency_ns = $slow_latency/" "$SPEC" >"$slow"
  found=0
  for k in 1 2 3; do
    run "$slow" "$OUT/slow$s-$k"
    read -r v f r < <(compare "$OUT/aa$k-a" "$OUT/slow$s-$k")
    echo "device $s % slower (latency_ns $slow_latency), vs A/A run $k-a: $v values, $r regressions"
    [ "$r" = 0 ] || found=$((found + 1))
  done
  echo "device $s % slower: flagged in $found of 3 comparisons"
  if [ "$found" = 3 ] && [ -z "$smallest" ]; then smallest=$s; fi
done
echo "smallest slowdown flagged in every comparison: ${smallest:-none of $SLOWDOWNS} %"
