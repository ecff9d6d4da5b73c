#!/bin/sh
# toolkit's deploy agent: /init of a RAM disk made from the OS image's own initramfs
# (its kernel modules, udev and busybox), booted over the network by iPXE.
#
# It brings up the NIC it booted from, reports the machine's hardware to toolkit's
# provisioning server, and does what the answer says: write the image to the disk
# the server chose, check the written bytes, lay the node's own files over it and
# power off. Every step is reported; any failure is reported with the command's
# output before the node powers off, so toolkit can name it.
#
# The protocol: src/deploy/provision/server.rs. Nothing here decides: the server
# picks the disk (and refuses a machine whose hardware differs from the blueprint).

export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# initramfs-tools ships klibc's small `cat`, `dd`, `readlink`, `mount`… beside
# busybox; they lack options used here (`dd conv=fsync`), so every tool is busybox's.
for applet in awk blockdev cat cut dd grep head ip mkdir mount partprobe poweroff printf \
    readlink sed sha256sum sleep sort sync tail tar tr udhcpc umount wc wget; do
    eval "$applet() { busybox $applet \"\$@\"; }"
done
mkdir -p /proc /sys /dev /run /tmp /mnt
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts
mount -t devpts devpts /dev/pts
exec </dev/console >/dev/console 2>&1

say() { echo "toolkit-agent: $*"; }

SERVER=
MAC=
ADDRESS=
GATEWAY=
for word in $(cat /proc/cmdline); do
    case "$word" in
        toolkit.server=*) SERVER=${word#*=} ;;
        toolkit.mac=*) MAC=${word#*=} ;;
        # Booted from virtual media, where nothing answers DHCP: the address is given.
        toolkit.ip=*) ADDRESS=${word#*=} ;;
        toolkit.gateway=*) GATEWAY=${word#*=} ;;
    esac
done
MAC=$(echo "$MAC" | tr 'A-F-' 'a-f:')

halt_now() {
    sync
    say "powering off in 5 s"
    sleep 5
    poweroff -f
}

# Drivers: udev loads the modules of the hardware found, as the installed OS will.
for udevd in /usr/lib/systemd/systemd-udevd /lib/systemd/systemd-udevd; do
    [ -x "$udevd" ] && break
done
"$udevd" --daemon --resolve-names=never
udevadm trigger --type=subsystems --action=add
udevadm trigger --type=devices --action=add
udevadm settle --timeout=60 || true

if [ -z "$SERVER" ] || [ -z "$MAC" ]; then
    say "no toolkit.server= or toolkit.mac= on the kernel command line: nothing to do"
    halt_now
fi

# The NIC named by MAC (the one iPXE booted from, or the boot NIC inspection found).
IFACE=
tries=0
while [ -z "$IFACE" ] && [ $tries -lt 30 ]; do
    for dev in /sys/class/net/*; do
        [ "$(cat "$dev/address" 2>/dev/null)" = "$MAC" ] && IFACE=${dev##*/}
    done
    [ -z "$IFACE" ] && sleep 1
    tries=$((tries + 1))
done
if [ -z "$IFACE" ]; then
    say "no network interface with MAC $MAC (drivers missing from the initramfs?)"
    halt_now
fi
ip link set lo up
ip link set "$IFACE" up
if [ -n "$ADDRESS" ]; then
    ip addr add "$ADDRESS" dev "$IFACE"
    [ -n "$GATEWAY" ] && ip route add default via "$GATEWAY"
    say "$IFACE: $ADDRESS (given on the command line)"
elif ! udhcpc -i "$IFACE" -s /toolkit/udhcpc.sh -q -n -t 20 -T 3; then
    say "no DHCP answer on $IFACE"
    halt_now
fi

post() {
    # post PATH FILE: the server's answer on stdout. (Debian 12's busybox wget
    # crashes when `-T` and a POST meet: the time limit comes from `timeout`.)
    busybox timeout 120 busybox wget -q -O - --header 'Content-Type: text/plain' --post-file "$2" "$SERVER/agent/$MAC/$1"
}

report() {
    # report STEP [DETAIL]
    printf 'step=%s\n' "$1" > /tmp/report
    if [ -n "${2:-}" ]; then
        printf '%s' "$2" | tr '\n' ' ' | sed 's/^/detail=/' >> /tmp/report
        echo >> /tmp/report
    fi
    say "$1${2:+: $2}"
    post progress /tmp/report > /dev/null || say "could not report $1 to $SERVER"
}

fail() {
    report failed "$*"
    halt_now
}

# JSON strings from sysfs text: quotes, backslashes and control characters dropped.
clean() { tr -d '"\\\000-\037' | sed 's/^ *//; s/ *$//'; }
field() { [ -r "$1" ] && clean < "$1"; }
quoted() { if [ -n "$1" ]; then printf '"%s"' "$1"; else printf null; fi; }

inventory() {
    printf '{"disks":['
    first=1
    for block in /sys/block/*; do
        name=${block##*/}
        case "$name" in loop* | ram* | sr* | fd* | zram* | dm-* | md*) continue ;; esac
        [ -e "$block/device" ] || continue
        sectors=$(cat "$block/size")
        model=$(field "$block/device/model")
        serial=$(field "$block/serial" || true)
        [ -n "$serial" ] || serial=$(field "$block/device/serial" || true)
        wwn=$(field "$block/wwid" || true)
        [ -n "$wwn" ] || wwn=$(field "$block/device/wwid" || true)
        by_path=
        for link in /dev/disk/by-path/*; do
            [ -L "$link" ] && [ "$(readlink "$link")" = "../../$name" ] && by_path=${link##*/}
        done
        by_id=
        for link in /dev/disk/by-id/*; do
            [ -L "$link" ] && [ "$(readlink "$link")" = "../../$name" ] && by_id="$by_id${by_id:+ }${link##*/}"
        done
        rotational=$(cat "$block/queue/rotational" 2>/dev/null || echo 0)
        [ $first = 1 ] || printf ','
        first=0
        printf '{"name":"%s","size_bytes":%s,"model":%s,"serial":%s,"wwn":%s,"by_path":%s,"by_id":%s,"rotational":%s}' \
            "$name" "$((sectors * 512))" "$(quoted "$model")" "$(quoted "$serial")" "$(quoted "$wwn")" \
            "$(quoted "$by_path")" "$(quoted "$by_id")" "$([ "$rotational" = 1 ] && echo true || echo false)"
    done
    printf '],"nics":['
    first=1
    for dev in /sys/class/net/*; do
        name=${dev##*/}
        [ "$name" = lo ] && continue
        speed=$(cat "$dev/speed" 2>/dev/null || true)
        case "$speed" in '' | -*) speed=null ;; esac
        [ $first = 1 ] || printf ','
        first=0
        printf '{"name":"%s","mac":%s,"speed_mbps":%s}' "$name" "$(quoted "$(field "$dev/address")")" "$speed"
    done
    printf '],"pci":['
    first=1
    for dev in /sys/bus/pci/devices/*; do
        [ -e "$dev/vendor" ] || continue
        [ $first = 1 ] || printf ','
        first=0
        printf '{"address":"%s","vendor":"%s","device":"%s","class":"%s"}' \
            "${dev##*/}" "$(field "$dev/vendor")" "$(field "$dev/device")" "$(field "$dev/class")"
    done
    threads=$(grep -c '^processor' /proc/cpuinfo)
    sockets=$(grep '^physical id' /proc/cpuinfo | sort -u | wc -l)
    [ "$sockets" -gt 0 ] || sockets=1
    per_socket=$(grep -m1 '^cpu cores' /proc/cpuinfo | sed 's/.*: *//')
    [ -n "$per_socket" ] || per_socket=$threads
    model=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: *//' | clean)
    memory=$(grep '^MemTotal' /proc/meminfo | awk '{print $2}')
    printf '],"cpus":{"sockets":%s,"cores":%s,"threads":%s,"model":%s},"memory_kib":%s}\n' \
        "$sockets" "$((sockets * per_socket))" "$threads" "$(quoted "$model")" "$memory"
}

say "up on $IFACE ($MAC), server $SERVER"
inventory > /tmp/inventory.json
if ! post inventory /tmp/inventory.json > /tmp/answer; then
    say "the server did not answer the inventory"
    halt_now
fi
value() { sed -n "s/^$1=//p" /tmp/answer | head -n 1; }
ACTION=$(value action)
if [ "$ACTION" != install ]; then
    say "refused: $(value reason)"
    halt_now
fi
DISK=$(value disk)
IMAGE=$(value image)
SIZE=$(value image_size)
SHA256=$(value image_sha256)
PARTITION=$(value root_partition)
OVERLAY=$(value overlay)
[ -b "$DISK" ] || fail "the disk $DISK chosen by the server is not a block device here"

report writing "$DISK"
if ! wget -q -O - "$IMAGE" | dd of="$DISK" bs=4M conv=fsync 2>/tmp/dd.log; then
    fail "writing $IMAGE to $DISK: $(tail -n 3 /tmp/dd.log)"
fi
sync
report written "$DISK"

# What is on the disk now, not what was sent: read back and hashed.
written=$(dd if="$DISK" bs=1M count=$((SIZE / 1048576)) 2>/dev/null | sha256sum | cut -d' ' -f1)
[ "$written" = "$SHA256" ] || fail "the disk holds $written after the write, the image is $SHA256"
report verified "$written"

# The node's own files (host name, network, SSH keys) laid over the image's root.
blockdev --rereadpt "$DISK" 2>/dev/null || partprobe "$DISK" 2>/dev/null || true
case "$DISK" in
    *[0-9]) ROOT=${DISK}p$PARTITION ;;
    *) ROOT=$DISK$PARTITION ;;
esac
tries=0
while [ ! -b "$ROOT" ] && [ $tries -lt 20 ]; do
    sleep 1
    tries=$((tries + 1))
done
[ -b "$ROOT" ] || fail "no partition $ROOT after writing the image"
modprobe ext4 2>/dev/null || true
mount -t ext4 "$ROOT" /mnt 2>/tmp/mount.log || fail "mounting $ROOT: $(cat /tmp/mount.log)"
if ! wget -q -O - "$OVERLAY" | tar -x -C /mnt 2>/tmp/tar.log; then
    umount /mnt
    fail "the node's files from $OVERLAY: $(tail -n 3 /tmp/tar.log)"
fi
sync
umount /mnt || fail "unmounting $ROOT"
report overlay "$ROOT"
report done "$DISK"
halt_now
