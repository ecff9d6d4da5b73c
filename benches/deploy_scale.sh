#!/usr/bin/env bash
# deploy_scale.sh [N…]: a whole `toolkit deploy` of the generated blueprints of
# benches/plan_scale.py (N GPU nodes, software section included; default 1024 and
# 4096) through the real observe, planner, walker and state writer over simulated
# hosts (src/apply/sim.rs): a first deploy on empty hosts, then a deploy with nothing
# to change. Prints one line per size:
#   deploy_scale hosts=… resources=… compile_s=… first_s=… changes=… nochange_s=… state_mib=…
# The hosts answer in-process, so the figures are toolkit's orchestration alone
# (no network, no remote work): what a deploy at that size costs the controller.
# BEFORE=<another build's lib test binary> (target/release/deps/toolkit-<hash>, kept
# from before a change) runs it first, for each size, for before/after figures from
# the same run (its line starts with `before`).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
((${#sizes[@]})) || sizes=(1024 4096)
PROFILE=${PROFILE:---release}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo test $PROFILE --lib --no-run --quiet
for n in "${sizes[@]}"; do
  python3 -c "import sys; sys.path.insert(0, 'benches'); import plan_scale; print(plan_scale.blueprint($n, True), end='')" > "$tmp/scale$n.yaml"
  if [ -n "${BEFORE:-}" ]; then
    TOOLKIT_BENCH_BLUEPRINT=$tmp/scale$n.yaml "$BEFORE" --quiet bench_deploy_scale --ignored --nocapture 2>&1 \
      | grep -E '^deploy_scale|panicked|assert' | sed 's/^/before /' || { echo "deploy_scale $n (before) failed" >&2; exit 1; }
  fi
  TOOLKIT_BENCH_BLUEPRINT=$tmp/scale$n.yaml cargo test $PROFILE --lib --quiet bench_deploy_scale -- --ignored --nocapture 2>&1 \
    | grep -E '^deploy_scale|panicked|assert' || { echo "deploy_scale $n failed" >&2; exit 1; }
done
