#!/bin/sh
# Runs once, inside the debootstrapped root (chroot), before it is imported as the
# lab image. It leaves a pristine OS: packages installed, their daemons disabled,
# no host keys, no machine id, no secrets and nothing of toolkit's configuration.
# Changing this file changes the image tag.
set -eu

# Installed daemons stay off until deploy enables the ones each role needs (slurmctld
# on the head, frr on the switches…): the same image serves every role, and a lab that
# already ran slurmd or mariadb everywhere would let a deploy that forgot them pass.
# Timers that reach the network or scrub disks have no place in a throwaway container.
systemctl disable \
    munge.service slurmctld.service slurmd.service slurmdbd.service \
    mariadb.service mariadb.socket frr.service lldpd.service \
    nfs-server.service nfs-blkmap.service nfs-client.target rpcbind.service rpcbind.socket \
    prometheus.service prometheus-alertmanager.service prometheus-node-exporter.service \
    prometheus-frr-exporter.service prometheus-ipmi-exporter.service apt-cacher-ng.service \
    e2scrub_reap.service systemd-pstore.service \
    apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer
# openipmi's init script loads the IPMI kernel drivers, which a container cannot: enabled,
# it leaves every container `degraded`. The lab only uses the package's ipmi_sim (the
# simulated BMC the tests start), so the script is masked, not merely disabled.
ln -sf /dev/null /etc/systemd/system/openipmi.service

# Host keys are made at each container's first start, so no two containers (and no two
# builds) share one; `toolkit lab up` then records them in the lab's known_hosts.
# Debian's unit checks the config first (`sshd -t`), which fails without keys: keygen goes first.
rm -f /etc/ssh/ssh_host_*
mkdir -p /etc/systemd/system/ssh.service.d
cat > /etc/systemd/system/ssh.service.d/lab-host-keys.conf <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
UNIT

# The munge key is a cluster secret: deploy distributes one (inventory `secrets.munge_key`).
rm -f /etc/munge/munge.key

# An empty machine-id makes systemd generate one per container at first boot; a shared
# one would make every container the same machine to journald and dbus.
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id

# debootstrap copied the build host's name and resolver; Docker provides both at run time.
echo localhost > /etc/hostname
rm -f /etc/resolv.conf

# policy-rc.d kept daemons from starting during the build; inside the lab, init must be free to.
rm -f /usr/sbin/policy-rc.d

# Package caches and lists: a few hundred MB, stale the day after anyway.
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/*.log
