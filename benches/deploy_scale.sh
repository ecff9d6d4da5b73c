#!/usr/bin/env bash
# deploy_scale.sh [N…]: a whole `toolkit deploy` of the generated blueprints of
# benches/plan_scale.py (N GPU nodes, software section included; default 1024 and
# 4096) through the real observe, planner, walker and state writer over simulated
# hosts (src/apply/sim.rs): a first deploy on empty hosts, then a deploy with nothing
# to change. Prints one line per size:
#   deploy_scale hosts=… resources=… compile_s=… first_s=… changes=… nochange_s=…
#     nochange_cpu_s=… state_load_s=… state_mib=… peak_rss_mib=…
# then the whole run's `perf stat` counts (compile, first and no-change deploy):
#   perf instructions_u=… task_clock_s=…
# (PERF=0 leaves perf out). The hosts answer in-process, so the figures are
# toolkit's orchestration alone (no network, no remote work): what a deploy at that
# size costs the controller. CPU seconds and instructions move less than wall time
# on a machine other builds load.
# BEFORE=<another build's lib test binary> (target/release/deps/toolkit-<hash>, kept
# from before a change) runs it first, for each size, for before/after figures from
# the same run (its lines start with `before`).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
((${#sizes[@]})) || sizes=(1024 4096)
PROFILE=${PROFILE:---release}
PERF=${PERF:-1}
command -v perf >/dev/null || PERF=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
after=$(cargo test $PROFILE --lib --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message.get("executable") and message["target"]["kind"] == ["lib"]:
        print(message["executable"])')
# One run of a lib test binary: its figures, then perf's.
run() {
  local binary=$1 prefix=$2 blueprint=$3
  local perf=()
  ((PERF)) && perf=(perf stat -x, -e instructions:u,task-clock -o "$tmp/perf")
  TOOLKIT_BENCH_BLUEPRINT=$blueprint "${perf[@]}" "$binary" --quiet bench_deploy_scale --ignored --nocapture 2>&1 \
    | grep -E '^deploy_scale|panicked|assert' | sed "s/^/$prefix/" || return 1
  if ((PERF)); then
    awk -F, -v prefix="$prefix" '
      $3 ~ /^instructions/ { instructions = $1 }
      $3 ~ /^task-clock/ { clock = $1 / 1000 }
      END { printf "%sperf instructions_u=%s task_clock_s=%.2f\n", prefix, instructions, clock }' "$tmp/perf"
  fi
}
for n in "${sizes[@]}"; do
  python3 -c "import sys; sys.path.insert(0, 'benches'); import plan_scale; print(plan_scale.blueprint($n, True), end='')" > "$tmp/scale$n.yaml"
  if [ -n "${BEFORE:-}" ]; then
    run "$BEFORE" "before " "$tmp/scale$n.yaml" || { echo "deploy_scale $n (before) failed" >&2; exit 1; }
  fi
  run "$after" "" "$tmp/scale$n.yaml" || { echo "deploy_scale $n failed" >&2; exit 1; }
done
