#!/usr/bin/env bash
# inventory.sh N: a toolkit inventory for the hosts of sshhosts.sh (same base dir).
set -euo pipefail
B="${SSHHOSTS_DIR:-/tmp/sshhosts}"
P="${SSHHOSTS_PREFIX:-127.0.1}"
n=$1
echo "version: 1"
echo "defaults: { user: root, port: 22, identity_file: $B/id_ed25519, known_hosts: $B/known_hosts }"
echo "hosts:"
for k in $(seq 1 "$n"); do
  echo "  host$k: { address: $P.$k, vars: { host_root: $B/root/host$k } }"
done
