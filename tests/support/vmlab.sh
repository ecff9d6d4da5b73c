#!/usr/bin/env bash
# The VM lab: blank QEMU guests (TCG: nested KVM cannot run a Linux guest here) on a
# bridge inside a network namespace, each behind its own Redfish BMC — sushy-tools'
# emulator with its libvirt driver, so power, boot override and virtual media act on
# the real VM. What toolkit provisions bare metal on, in tests and by hand.
#
#   vmlab.sh up NAME COUNT [MEMORY_MIB] [DISK_GIB]   guests NAME01…, BMCs on 10.77.0.1:8001…
#                                                     (VMLAB_FIRMWARE=uefi: OVMF instead of SeaBIOS)
#   vmlab.sh down NAME                                removes all of it
#   vmlab.sh link NAME VM up|down                     the guest's NIC link (a cut cable)
#   vmlab.sh boothost NAME PUBKEY                     an SSH host at 10.77.0.2 on the bridge (key
#                                                     PUBKEY for root); prints its known_hosts line
#   vmlab.sh exec NAME CMD…                           runs CMD inside the namespace
#
# Addresses: the bridge br0 is 10.77.0.1/24 in netns tk-NAME; guest K has MAC
# 52:54:00:77:00:1K and is meant to get 10.77.0.1K; its BMC answers on
# http://10.77.0.1:800K (user `admin`, password in $VMLAB_DIR/bmc-password).
# Everything lives under $VMLAB_DIR (default /tmp/toolkit-vmlab-NAME). One lab at a
# time: libvirtd's sockets are the machine's.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${TOOLKIT_LIBVIRT_VENV:-$repo/.toolkit/venv-libvirt}

usage() { sed -n '7,14p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
command=$1
name=$2
netns=tk-$name
dir=${VMLAB_DIR:-/tmp/toolkit-vmlab-$name}
in_ns() { ip netns exec "$netns" "$@"; }

vm_name() { printf '%s%02d' "$name" "$1"; }
vm_mac() { printf '52:54:00:77:00:%02x' $((16 + $1)); }

up() {
    local count=$1 memory=${2:-1024} disk_gib=${3:-8}
    mkdir -p "$dir"
    # (No `grep -q` or `head` after a pipe: an early close is SIGPIPE, fatal under pipefail.)
    if ! ip netns list | grep -x "$netns\( (id: [0-9]*)\)\?" >/dev/null; then
        ip netns add "$netns"
    fi
    in_ns ip link set lo up
    if ! in_ns ip link show br0 >/dev/null 2>&1; then
        in_ns ip link add br0 type bridge
        in_ns ip addr add 10.77.0.1/24 dev br0
    fi
    in_ns ip link set br0 up

    # libvirt as root without a security driver: it must open disks it did not
    # create (the reference notes the snag), and there is no systemd to start it.
    local conf=/etc/libvirt/qemu.conf
    grep -q '^security_driver = "none"' "$conf" || echo 'security_driver = "none"' >> "$conf"
    grep -q '^user = "root"' "$conf" || echo 'user = "root"' >> "$conf"
    grep -q '^group = "root"' "$conf" || echo 'group = "root"' >> "$conf"
    # Taps join the bridge inside the namespace only when libvirtd runs there.
    # (A daemon of an earlier lab may linger as a zombie: only live ones count.)
    if ! [ -S /run/libvirt/virtlogd-sock ] || ! pgrep --runstates R,S,D -x virtlogd >/dev/null; then in_ns virtlogd -d; fi
    if ! virsh -c qemu:///system version >/dev/null 2>&1; then in_ns libvirtd -d; fi
    local tries=0
    until virsh -c qemu:///system version >/dev/null 2>&1; do
        tries=$((tries + 1))
        [ $tries -lt 50 ] || { echo "libvirtd did not answer" >&2; exit 1; }
        sleep 0.2
    done
    # sushy's virtual media uploads the ISO into a pool named `default`. libvirtd keeps
    # pool definitions across restarts but not their state, and an earlier lab's
    # directory is gone: defined afresh, in this lab's directory, and started.
    mkdir -p "$dir/pool"
    if virsh -c qemu:///system pool-info default >/dev/null 2>&1; then
        virsh -c qemu:///system pool-destroy default >/dev/null 2>&1 || true
        virsh -c qemu:///system pool-undefine default >/dev/null 2>&1 || true
    fi
    virsh -c qemu:///system pool-define-as default dir --target "$dir/pool" >/dev/null
    virsh -c qemu:///system pool-start default >/dev/null

    [ -x "$venv/bin/sushy-emulator" ] || {
        echo "sushy-tools with libvirt is missing: .ci/setup makes $venv" >&2
        exit 1
    }
    [ -f "$dir/bmc-password" ] || head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/bmc-password"
    local hash
    hash=$("$venv/bin/python" -c 'import bcrypt,sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(rounds=4)).decode())' "$(cat "$dir/bmc-password")")
    echo "admin:$hash" > "$dir/htpasswd"

    local k
    for k in $(seq 1 "$count"); do
        local vm disk uuid
        vm=$(vm_name "$k")
        disk=$dir/$vm.qcow2
        [ -f "$disk" ] || qemu-img create -q -f qcow2 "$disk" "${disk_gib}G"
        if ! virsh -c qemu:///system dominfo "$vm" >/dev/null 2>&1; then
            uuid=$(cat /proc/sys/kernel/random/uuid)
            local firmware=''
            if [ "${VMLAB_FIRMWARE:-bios}" = uefi ]; then
                firmware="<loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>
    <nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'>$dir/$vm.VARS.fd</nvram>"
            fi
            cat > "$dir/$vm.xml" <<XML
<domain type='qemu'>
  <name>$vm</name>
  <uuid>$uuid</uuid>
  <memory unit='MiB'>$memory</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    $firmware
    <boot dev='hd'/>
  </os>
  <features><acpi/><apic/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='$disk'/>
      <target dev='vda' bus='virtio'/>
      <serial>$vm-disk</serial>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <target dev='sda' bus='sata'/>
      <readonly/>
    </disk>
    <interface type='bridge'>
      <source bridge='br0'/>
      <mac address='$(vm_mac "$k")'/>
      <model type='virtio'/>
    </interface>
    <serial type='file'>
      <source path='$dir/$vm.serial.log' append='on'/>
      <target port='0'/>
    </serial>
    <console type='file'>
      <source path='$dir/$vm.serial.log' append='on'/>
      <target type='serial' port='0'/>
    </console>
  </devices>
</domain>
XML
            virsh -c qemu:///system define "$dir/$vm.xml" >/dev/null
        fi
        uuid=$(virsh -c qemu:///system domuuid "$vm" | sed -n 1p)
        local port=$((8000 + k))
        cat > "$dir/$vm.sushy.py" <<CONF
SUSHY_EMULATOR_LIBVIRT_URI = 'qemu:///system'
SUSHY_EMULATOR_ALLOWED_INSTANCES = ['$uuid']
SUSHY_EMULATOR_AUTH_FILE = '$dir/htpasswd'
SUSHY_EMULATOR_IGNORE_BOOT_DEVICE = False
CONF
        if ! [ -f "$dir/$vm.sushy.pid" ] || ! kill -0 "$(cat "$dir/$vm.sushy.pid")" 2>/dev/null; then
            in_ns "$venv/bin/sushy-emulator" --config "$dir/$vm.sushy.py" -i 10.77.0.1 -p "$port" \
                > "$dir/$vm.sushy.log" 2>&1 &
            echo $! > "$dir/$vm.sushy.pid"
        fi
    done
    for k in $(seq 1 "$count"); do
        local port=$((8000 + k)) tries=0
        until in_ns "$venv/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('http://10.77.0.1:$port/redfish/v1/')" 2>/dev/null; do
            tries=$((tries + 1))
            [ $tries -lt 100 ] || { echo "the BMC of $(vm_name "$k") did not answer; see $dir/$(vm_name "$k").sushy.log" >&2; exit 1; }
            sleep 0.2
        done
    done
    describe "$count"
}

describe() {
    local count=$1 k
    printf '{"netns":"%s","dir":"%s","bridge":"br0","server":"10.77.0.1","bmc_user":"admin","bmc_password_file":"%s","vms":[' \
        "$netns" "$dir" "$dir/bmc-password"
    for k in $(seq 1 "$count"); do
        [ "$k" = 1 ] || printf ','
        printf '{"name":"%s","mac":"%s","address":"10.77.0.%d","bmc":"http://10.77.0.1:%d","serial_log":"%s","disk":"%s"}' \
            "$(vm_name "$k")" "$(vm_mac "$k")" $((10 + k)) $((8000 + k)) "$dir/$(vm_name "$k").serial.log" "$dir/$(vm_name "$k").qcow2"
    done
    printf ']}\n'
}

down() {
    local vm
    for vm in $(virsh -c qemu:///system list --all --name 2>/dev/null | grep "^$name[0-9][0-9]$" || true); do
        virsh -c qemu:///system destroy "$vm" >/dev/null 2>&1 || true
        virsh -c qemu:///system undefine "$vm" --nvram >/dev/null 2>&1 || virsh -c qemu:///system undefine "$vm" >/dev/null 2>&1 || true
    done
    local pid
    for pid in "$dir"/*.sushy.pid; do
        [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
    done
    if ip netns list | grep "^$netns\b" >/dev/null; then
        # libvirtd and virtlogd of this lab run in its namespace.
        local pids tries=0
        pids=$(ip netns pids "$netns" 2>/dev/null || true)
        for pid in $pids; do kill "$pid" 2>/dev/null || true; done
        # Gone before returning: the next `up` must not find them half dead.
        while [ $tries -lt 50 ]; do
            local alive=0
            for pid in $pids; do
                if [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; then alive=1; fi
            done
            [ $alive = 0 ] && break
            tries=$((tries + 1))
            sleep 0.1
        done
        ip netns delete "$netns" || true
    fi
    rm -rf "$dir"
}

boothost() {
    # A second host on the guests' network, reached over SSH: where toolkit runs its
    # provisioning service when the inventory names `provisioning.host`. A real sshd
    # in the lab's namespace, on its own address.
    local pubkey=$1 home=$dir/boothost
    mkdir -p "$home" /run/sshd
    if ! in_ns ip -4 addr show br0 | grep 'inet 10\.77\.0\.2/' >/dev/null; then
        in_ns ip addr add 10.77.0.2/24 dev br0
    fi
    [ -f "$home/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C boothost -f "$home/ssh_host_ed25519_key"
    install -m 0600 "$pubkey" "$home/authorized_keys"
    cat > "$home/sshd_config" <<CONF
ListenAddress 10.77.0.2:22
HostKey $home/ssh_host_ed25519_key
PidFile $home/sshd.pid
AuthorizedKeysFile $home/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
CONF
    if ! [ -f "$home/sshd.pid" ] || ! kill -0 "$(cat "$home/sshd.pid")" 2>/dev/null; then
        in_ns /usr/sbin/sshd -f "$home/sshd_config" -E "$home/sshd.log"
    fi
    printf '10.77.0.2 %s\n' "$(cut -d' ' -f1,2 "$home/ssh_host_ed25519_key.pub")"
}

link() {
    # By MAC (the tap has no name while the guest is off); kept in the definition so it
    # holds across power cycles, and set live too when the guest runs.
    local vm=$1 state=$2 mac
    mac=$(virsh -c qemu:///system domiflist "$vm" | awk 'NR > 2 && $5 != "" && !found {print $5; found = 1}')
    virsh -c qemu:///system domif-setlink "$vm" "$mac" "$state" --config >/dev/null
    if [ "$(virsh -c qemu:///system domstate "$vm")" = running ]; then
        virsh -c qemu:///system domif-setlink "$vm" "$mac" "$state" >/dev/null
    fi
}

case "$command" in
    up) shift 2; [ $# -ge 1 ] || usage; up "$@" ;;
    down) down ;;
    link) [ $# -eq 4 ] || usage; link "$3" "$4" ;;
    boothost) [ $# -eq 3 ] || usage; boothost "$3" ;;
    exec) shift 2; in_ns "$@" ;;
    *) usage ;;
esac
