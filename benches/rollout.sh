#!/usr/bin/env bash
# Waves of a 4,096-node rolling change (drain class on every node, max-unavailable 5 %)
# planned and driven through the real walker and rollout with an in-process transport
# and Slurm: prints the time to plan the waves and the orchestration cost per wave.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release --lib bench_rollout_4096_nodes -- --ignored --nocapture 2>&1 | grep -E '^(4096|rollout)'
