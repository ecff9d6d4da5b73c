#!/bin/sh
# Runs once inside the debootstrapped root (chroot) before it becomes toolkit's OS
# image. It leaves an OS every node can share: no host keys, no machine id, no
# secrets, no password; what makes a node itself (host name, network, SSH keys)
# comes from the overlay the deploy agent lays over the written image.
# Changing this file changes the image's hash.
set -eu

# Locale and time zone from the blueprint's `os` section.
case "$TOOLKIT_LOCALE" in
    C | C.UTF-8 | POSIX) ;;
    *)
        echo "$TOOLKIT_LOCALE UTF-8" >> /etc/locale.gen
        locale-gen
        ;;
esac
echo "LANG=$TOOLKIT_LOCALE" > /etc/default/locale
ln -sf "/usr/share/zoneinfo/$TOOLKIT_TIMEZONE" /etc/localtime
echo "$TOOLKIT_TIMEZONE" > /etc/timezone

# The network: systemd-networkd, configured per node (by MAC) by the overlay.
systemctl enable systemd-networkd.service

# sshd takes keys only, and offers only the ed25519 host key toolkit generated for
# the node (pinned in known_hosts before the first boot). Should the image boot
# without its overlay, sshd still starts with keys made there and then.
mkdir -p /etc/ssh/sshd_config.d /etc/systemd/system/ssh.service.d
cat > /etc/ssh/sshd_config.d/10-toolkit.conf <<'CONF'
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
HostKey /etc/ssh/ssh_host_ed25519_key
AuthorizedKeysFile .ssh/authorized_keys /etc/ssh/authorized_keys/%u
CONF
cat > /etc/systemd/system/ssh.service.d/10-toolkit-host-key.conf <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
UNIT
rm -f /etc/ssh/ssh_host_*
systemctl enable ssh.service

# The image's root partition is small (quick to write); at every boot the node grows
# it and its file system to the end of the disk (growpart says NOCHANGE once done).
cat > /usr/local/sbin/toolkit-grow-root <<'SCRIPT'
#!/bin/sh
# Grows the partition holding / to the end of its disk, then the file system.
set -eu
root=$(findmnt -no SOURCE /)
name=${root#/dev/}
disk=/dev/$(lsblk -no pkname "$root")
growpart "$disk" "$(cat "/sys/class/block/$name/partition")" || true
resize2fs "$root"
SCRIPT
chmod 0755 /usr/local/sbin/toolkit-grow-root
cat > /etc/systemd/system/toolkit-grow-root.service <<'UNIT'
[Unit]
Description=Grow the root partition and file system to the disk (toolkit)
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/toolkit-grow-root

[Install]
WantedBy=sysinit.target
UNIT
systemctl enable toolkit-grow-root.service

# The user deploy logs in as; root itself has no password.
if [ "$TOOLKIT_USER" != root ]; then
    useradd --create-home --shell /bin/bash "$TOOLKIT_USER"
    echo "$TOOLKIT_USER ALL=(ALL) NOPASSWD:ALL" > "/etc/sudoers.d/90-toolkit-$TOOLKIT_USER"
    chmod 0440 "/etc/sudoers.d/90-toolkit-$TOOLKIT_USER"
fi
passwd --lock root

# Secrets made by package scripts would be shared by every node: the munge key is
# the cluster's, distributed by deploy.
rm -f /etc/munge/munge.key

# An empty machine-id makes systemd generate one at each node's first boot.
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
# debootstrap copied the build host's name and resolver; the overlay writes the node's.
echo localhost > /etc/hostname
rm -f /etc/resolv.conf

# The initramfs is made again now that every package is in: busybox (the deploy
# agent's shell, taken from this very initramfs) may have come after the kernel.
update-initramfs -u -k all

# policy-rc.d kept daemons from starting during the build; on the node, init is free.
rm -f /usr/sbin/policy-rc.d
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/tmp/*
