#!/usr/bin/env bash
# fanout.sh N: the fan-out push workload on N real sshd hosts (loopback), with
# toolkit, Ansible, pyinfra and the plain-ssh floor. Per host: ensure a 0755 dir,
# render and push 3 files (~2 KB, ~20 KB, ~200 KB), run one command; a first run on
# empty hosts and an idempotent rerun. Prints medians over RUNS runs (default 3) and
# the peak memory of the controller process (and of toolkit's connection keeper, the
# background process that holds the SSH connections between runs), then one summary line:
#   fanout N=<n> toolkit_first_s=… toolkit_rerun_s=… toolkit_peak_mib=… keeper_peak_mib=…
#          ansible_first_s=… ansible_rerun_s=…
#          pyinfra_first_s=… pyinfra_rerun_s=… floor_s=… floor_c25519_s=…
# floor_s is plain `ssh` with OpenSSH's default key exchange (sntrup761x25519 in 9.2);
# floor_c25519_s is the same with curve25519-sha256, the exchange toolkit negotiates:
# the like-for-like floor.
# SKIP="ansible pyinfra" leaves tools out (their fields print as `-`). BEFORE=<another
# toolkit binary> runs that build too, alternating with this one, for before/after
# figures from the same run (`toolkit-before-*` rows). TOOLKIT=<binary> measures that
# binary instead of building this checkout.
# The Ansible/pyinfra workloads are the shared ones (benches/fanout/ has copies of the
# templates); Ansible and pyinfra are installed from PyPI into target/bench-venv.
set -euo pipefail
N=${1:?usage: fanout.sh N}
RUNS=${RUNS:-3}
SKIP=${SKIP:-}
BEFORE=${BEFORE:-}
TOOLKIT=${TOOLKIT:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The shared Ansible config names /tmp/sshhosts; keep the default base dir.
export SSHHOSTS_DIR=/tmp/sshhosts SSHHOSTS_PREFIX=127.0.1
B=$SSHHOSTS_DIR
WORKLOAD=$ROOT/benches/fanout/workload
VENV=$ROOT/target/bench-venv
HOSTS=$ROOT/tests/support/sshhosts.sh

skipped() { [[ " $SKIP " == *" $1 "* ]]; }

setup() {
  if [ -z "$TOOLKIT" ]; then
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
    TOOLKIT=$ROOT/target/release/toolkit
  fi
  if ! { skipped ansible && skipped pyinfra; } && [ ! -x "$VENV/bin/pyinfra" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet ansible-core==2.19.14 pyinfra==3.10.0 jinja2
  fi
  "$HOSTS" up "$N" >/dev/null
  "$HOSTS" inventory all >/dev/null
  "$ROOT/benches/fanout/inventory.sh" "$N" > "$B/inventory_toolkit.yaml"
  mkdir -p "$B/workload"
  cp -r "$ROOT/benches/fanout/workload/templates" "$B/workload/"
}

clean_hosts() { for k in $(seq 1 "$N"); do rm -rf "$B/root/host$k/etc/app"; done; rm -f "$B/toolkit-state.json"; }

# timed LABEL CMD…: appends "seconds peak_kib" to $B/times-LABEL
timed() {
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$B/.time" "$@" >/dev/null 2>"$B/.err" || { cat "$B/.err" >&2; echo "$label failed" >&2; exit 1; }
  cat "$B/.time" >> "$B/times-$label"
}

median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }
peak_mib() { awk '{if ($2>m) m=$2} END {if (NR==0) print "-"; else printf "%.0f\n", m/1024}'; }

# The connection keepers' sockets of the toolkit runs (toolkit keeps SSH connections
# open for 60 s after a run by default; one socket per build): private to the bench.
export XDG_RUNTIME_DIR=$B/xdg
mkdir -p -m 0700 "$XDG_RUNTIME_DIR"
KEEPER_SOCKETS=$XDG_RUNTIME_DIR/toolkit/

# keeper_kib: peak RSS (VmHWM) of the running connection keeper, or nothing.
keeper_kib() {
  local dir
  for dir in /proc/[0-9]*; do
    if tr '\0' ' ' < "$dir/cmdline" 2>/dev/null | grep -q -- "ssh-mux --socket $KEEPER_SOCKETS"; then
      awk '/^VmHWM:/ {print $2}' "$dir/status"
      return
    fi
  done
}

# push LABEL BINARY: a first run on clean hosts with no kept connection (cold, as a
# first run after the idle time), then a rerun (which reuses the kept connections
# when the binary keeps them). The keeper's peak memory goes to times-LABEL-keeper.
push() {
  clean_hosts
  local label=$1 binary=$2
  "$binary" disconnect >/dev/null 2>&1 || true
  # Kept for 60 s (the default since they survive dead hosts; an older build needs it
  # asked for); PERSIST=0 measures without.
  export TOOLKIT_SSH_PERSIST="${PERSIST:-60}"
  for run in first rerun; do
    timed "$label-$run" "$binary" push "$ROOT/benches/fanout/push.yaml" -i "$B/inventory_toolkit.yaml" --yes --parallel "$N" --state "$B/toolkit-state.json"
  done
  local keeper
  keeper=$(keeper_kib)
  if [ -n "$keeper" ]; then echo "0 $keeper" >> "$B/times-$label-keeper"; fi
  "$binary" disconnect >/dev/null 2>&1 || true
}

run_tool() {
  local tool=$1
  for _ in $(seq 1 "$RUNS"); do
    clean_hosts
    case $tool in
      toolkit)
        push toolkit "$TOOLKIT"
        if [ -n "$BEFORE" ]; then push toolkit-before "$BEFORE"; fi ;;
      ansible)
        export ANSIBLE_CONFIG=$WORKLOAD/ansible/ansible.cfg
        timed ansible-first "$VENV/bin/ansible-playbook" -f "$N" "$WORKLOAD/ansible/push.yml"
        timed ansible-rerun "$VENV/bin/ansible-playbook" -f "$N" "$WORKLOAD/ansible/push.yml" ;;
      pyinfra)
        timed pyinfra-first "$VENV/bin/pyinfra" -y --parallel "$N" "$B/inventory_pyinfra.py" "$WORKLOAD/pyinfra/push.py"
        timed pyinfra-rerun "$VENV/bin/pyinfra" -y --parallel "$N" "$B/inventory_pyinfra.py" "$WORKLOAD/pyinfra/push.py" ;;
      floor)
        "$VENV/bin/python3" "$WORKLOAD/floor/render_all.py" "$N" 2>/dev/null || python3 "$WORKLOAD/floor/render_all.py" "$N"
        timed floor sh -c "cat '$B/hosts.txt' | xargs -P '$N' -n 1 '$WORKLOAD/floor/push_one.sh'"
        timed floor-c25519 sh -c "cat '$B/hosts.txt' | xargs -P '$N' -I{} '$WORKLOAD/floor/push_one.sh' {} -o KexAlgorithms=curve25519-sha256" ;;
    esac
  done
}

setup
rm -f "$B"/times-*
for tool in toolkit ansible pyinfra floor; do
  if skipped "$tool"; then continue; fi
  if [ "$tool" = floor ] && skipped ansible && skipped pyinfra && ! python3 -c 'import jinja2' 2>/dev/null; then continue; fi
  run_tool "$tool"
done
field() { if [ -f "$B/times-$1" ]; then median < "$B/times-$1"; else echo -; fi; }
memory() { if [ -f "$B/times-$1" ]; then peak_mib < "$B/times-$1"; else echo -; fi; }
printf '%-22s %10s %10s\n' run median_s peak_MiB
for label in toolkit-first toolkit-rerun toolkit-keeper toolkit-before-first toolkit-before-rerun toolkit-before-keeper ansible-first ansible-rerun pyinfra-first pyinfra-rerun floor floor-c25519; do
  printf '%-22s %10s %10s\n' "$label" "$(field "$label")" "$(memory "$label")"
done
echo "fanout N=$N toolkit_first_s=$(field toolkit-first) toolkit_rerun_s=$(field toolkit-rerun) toolkit_peak_mib=$(memory toolkit-first)/$(memory toolkit-rerun) keeper_peak_mib=$(memory toolkit-keeper) ansible_first_s=$(field ansible-first) ansible_rerun_s=$(field ansible-rerun) pyinfra_first_s=$(field pyinfra-first) pyinfra_rerun_s=$(field pyinfra-rerun) floor_s=$(field floor) floor_c25519_s=$(field floor-c25519)"
