#!/bin/sh
# udhcpc's hook in toolkit's deploy agent: configures the lease it got (busybox's
# `ip`, not another of the initramfs).
ip() { busybox ip "$@"; }
ipcalc() { busybox ipcalc "$@"; }
sed() { busybox sed "$@"; }
case "$1" in
    deconfig)
        ip addr flush dev "$interface"
        ;;
    bound | renew)
        prefix=${mask:-}
        [ -n "$prefix" ] || prefix=$(ipcalc -p "$ip" "$subnet" | sed 's/PREFIX=//')
        ip addr flush dev "$interface"
        ip addr add "$ip/$prefix" dev "$interface"
        if [ -n "${router:-}" ]; then
            ip route add default via "${router%% *}" dev "$interface"
        fi
        ;;
esac
exit 0
