#!/usr/bin/env bash
# Bare-metal provisioning on the VM lab: N blank QEMU guests (TCG, 1 vCPU, 1 GiB)
# behind sushy-tools' libvirt BMCs installed at once by `toolkit deploy --stage api`
# (inspection, PXE or virtual media, image written, boot from disk, SSH with the
# pinned key; the Slurm stage is left out). Prints, per run: power-on → SSH per node,
# the image build (cached; cold with COLD=1), and the bytes served per node.
#
#   benches/provision.sh            # 1, 2 and 4 VMs over PXE
#   BOOT=virtual-media benches/provision.sh 2
#   COLD=1 benches/provision.sh 1   # the image built from scratch first
#
# Needs what `.ci/setup` installs (qemu, libvirt, dnsmasq, sushy-tools' venv) and root
# (network namespaces). Results vary with the machine: TCG guests share its cores.
set -euo pipefail
cd "$(dirname "$0")/.."
counts=("${@:-1}")
[ $# -gt 0 ] || counts=(1 2 4)
boot=${BOOT:-network}
# The time is the guests' (TCG) and the network's: a debug build of toolkit measures
# the same; PROFILE=release for a release one.
profile=${PROFILE:-debug}
if [ "$profile" = release ]; then cargo build --release --quiet; else cargo build --quiet; fi
toolkit=$PWD/target/$profile/toolkit
# VMs are named after the lab (vm01, vm02…), as the example blueprint names its nodes.
lab=vm
work=$(mktemp -d)
trap 'tests/support/vmlab.sh down "$lab" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
cache=$PWD/.toolkit/os
if [ "${COLD:-0}" = 1 ]; then cache=$work/cold-cache; fi

printf '%-5s %-14s %-10s %-44s %s\n' vms boot image "power-on → SSH per node (s)" "bytes served per node"
for n in "${counts[@]}"; do
    tests/support/vmlab.sh down "$lab" >/dev/null 2>&1 || true
    description=$(tests/support/vmlab.sh up "$lab" "$n" 1024 8)
    dir=$work/$n
    mkdir -p "$dir/.toolkit/baremetal"
    ssh-keygen -q -t ed25519 -N '' -f "$dir/.toolkit/baremetal/id_ed25519"
    # The example with N nodes: vm01 is the controller, vm02… the compute group.
    python3 - "$n" "$boot" "$cache" "$dir" "$description" <<'PY'
import json, re, sys
n, boot, cache, dir, description = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
blueprint = open('blueprints/baremetal.yaml').read()
if n == 1:
    blueprint = re.sub(r'  - name: compute\n(    .*\n)+', '', blueprint)
    blueprint = blueprint.replace('groups: [head, compute]', 'groups: [head]')
else:
    blueprint = blueprint.replace('    count: 1\n    hostname: "vm{index:02}"', f'    count: {n - 1}\n    hostname: "vm{{index:02}}"')
open(f'{dir}/baremetal.yaml', 'w').write(blueprint)
lines = ['version: 1', 'defaults:', '  user: root', '  identity_file: .toolkit/baremetal/id_ed25519',
         '  known_hosts: .toolkit/baremetal/known_hosts', 'hosts:']
lines += [f'  {vm["name"]}: {{ address: {vm["address"]} }}' for vm in description['vms']]
lines += ['bmcs:']
lines += [f'  {vm["name"]}: {{ endpoint: "{vm["bmc"]}", username: {{ env: TOOLKIT_BMC_USER }}, '
          'password: { env: TOOLKIT_BMC_PASSWORD } }' for vm in description['vms']]
lines += ['secrets:', '  munge_key: { file: .toolkit/baremetal/munge.key }',
          'state_file: .toolkit/baremetal/state.json', 'provisioning:', '  interface: br0',
          '  address: 10.77.0.1', '  subnet: 10.77.0.0/24', f'  boot: {boot}',
          '  host_keys: .toolkit/baremetal/host-keys', f'  cache: {cache}']
open(f'{dir}/inventory.yaml', 'w').write('\n'.join(lines) + '\n')
PY
    netns=$(printf '%s' "$description" | python3 -c 'import json,sys; print(json.load(sys.stdin)["netns"])')
    password_file=$(printf '%s' "$description" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bmc_password_file"])')
    started=$(date +%s.%N)
    (cd "$dir" && TOOLKIT_BMC_USER=admin TOOLKIT_BMC_PASSWORD=$(cat "$password_file") TOOLKIT_SSH_PERSIST=0 \
        ip netns exec "$netns" "$toolkit" deploy baremetal.yaml -i inventory.yaml --yes --stage api) \
        > "$dir/deploy.log" 2>&1 || { cat "$dir/deploy.log"; exit 1; }
    ended=$(date +%s.%N)
    python3 - "$n" "$boot" "$dir/deploy.log" "$started" "$ended" <<'PY'
import re, sys
n, boot, log, started, ended = sys.argv[1], sys.argv[2], open(sys.argv[3]).read(), float(sys.argv[4]), float(sys.argv[5])
ssh = sorted(int(s) for s in re.findall(r'installed, SSH up after (\d+) s', log))
image = re.search(r'image: ready in ([\d.]+) s', log)
served = sorted(set(re.findall(r'served (\d+) bytes', log)))
print(f'{n:<5} {boot:<14} {(image.group(1) + " s") if image else "?":<10} '
      f'{" ".join(map(str, ssh)) + f"  (deploy {ended - started:.0f} s)":<44} {", ".join(served) or "?"}')
if len(ssh) != int(n):
    print(log, file=sys.stderr)
    sys.exit(1)
PY
done
