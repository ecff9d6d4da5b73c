#!/usr/bin/env python3
"""Offline pipeline at scale: lint + expand + render + plan of generated blueprints.

Generates rail-optimized RoCE blueprints (8 GPUs and 8 x 400G rails per node,
128-port switches) of 32, 1,024, 4,096 and 32,768 nodes, runs
`toolkit plan --offline` on each in its own process (release build) and prints the
median wall time over RUNS runs and the peak resident memory of that process.

The blueprints declare what a real cluster declares: a `software:` section (driver
pinned with Fabric Manager, DOCA-OFED, peermem, DCGM, enroot/pyxis, as in
blueprints/h100-superpod-1su.yaml), which adds ~30 resources per GPU node. With
SOFTWARE=both each size is also measured without that section (the figure before the
section existed), printed as a second line and as `software=no` in the summary.

With MONITORING=yes the blueprints also declare a `monitoring` section (Prometheus,
exporters, and the node health program and switch cabling checks that come with it),
as a cluster in production does; MONITORING=both measures each size with and without
it (`monitoring=yes|no` in the summary). The default, without it, is the blueprint the
issue's time and memory goals were set on.

    python3 benches/plan_scale.py            # all sizes, with the software section
    python3 benches/plan_scale.py 4096       # some sizes
    RUNS=5 python3 benches/plan_scale.py
    SOFTWARE=both python3 benches/plan_scale.py 4096   # with and without it
    MONITORING=both python3 benches/plan_scale.py 4096 # with and without monitoring
    BEFORE=/tmp/toolkit-main python3 benches/plan_scale.py 4096   # before/after, same run

With BEFORE=<a toolkit binary> (say, a release build of main) each size is run with
that binary too, alternating run by run with this tree's, and printed as
`binary=before` next to `binary=after`: the before/after figures of a change come
from the same run, under the same load.

Prints one line per size (and variant), then
`plan_scale n=<n> software=<yes|no> monitoring=<yes|no> seconds=<s> peak_mib=<m>` lines (with
` binary=<before|after>` when BEFORE is set).
"""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [int(a) for a in sys.argv[1:]] or [32, 1024, 4096, 32768]
RUNS = int(os.environ.get("RUNS", "3"))
SOFTWARE = os.environ.get("SOFTWARE", "yes")
MONITORING = os.environ.get("MONITORING", "no")
BEFORE = os.environ.get("BEFORE")
if SOFTWARE not in ("yes", "both"):
    sys.exit(f"SOFTWARE={SOFTWARE}: expected `yes` (default) or `both`")
if MONITORING not in ("no", "yes", "both"):
    sys.exit(f"MONITORING={MONITORING}: expected `no` (default), `yes` or `both`")

# What the GPU nodes run besides the OS (h100-superpod-1su.yaml, on RoCE: DOCA-OFED).
SOFTWARE_SECTION = """software:
  os: ubuntu2204
  gpu_driver: { version: 550.127.05, kernel_modules: open }
  fabric_manager: auto
  network: { stack: doca-ofed, version: 2.9.1 }
  peermem: true
  dcgm: { major: 4, diag_level: 3 }
  containers: { enroot: 3.5.0, pyxis: 0.20.0 }
  persistenced: true
"""

# Prometheus and Alertmanager on the controller, as blueprints/lab.yaml has them.
MONITORING_SECTION = """monitoring:
  retention: 15d
  scrape_interval: 15s
"""


def blueprint(nodes: int, software: bool, monitoring: bool = False) -> str:
    half_gpus = nodes * 8 // 2
    return f"""version: 1
cluster: {{ name: scale{nodes} }}
node_groups:
  - {{ name: ctl, count: 1, hostname: ctl01, roles: [controller, database, login, storage],
      cpu: {{ sockets: 2, cores_per_socket: 32 }}, memory_gib: 512 }}
  - name: gpu
    count: {nodes}
    hostname: "gpu{{index:05}}"
    roles: [compute]
    cpu: {{ sockets: 2, cores_per_socket: 56, threads_per_core: 2 }}
    memory_gib: 2048
    gpu: {{ model: h100, count: 8 }}
    rail_nics: {{ count: 8, speed_gbps: 400, link_layer: ethernet }}
fabric:
  compute:
    kind: roce
    rails: 8
    link_speed_gbps: 400
    switch: {{ model: sn5600, radix: 128 }}
    roce: {{ mode: lossless, pfc_priority: 3, ecn: true }}
    addressing: {{ rail_pool: 10.0.0.0/9, loopback_pool: 10.128.0.0/16 }}
  management:
    inband: {{ subnet: 10.192.0.0/14 }}
storage:
  filesystems:
    - {{ name: home, kind: nfs, server_group: ctl, export: /export/home, mount: /home }}
scheduler:
  kind: slurm
  slurm:
    partitions: [ {{ name: gpu, groups: [gpu], default: true }} ]
tenants:
  - {{ name: team-a, users: [alice], guaranteed_gpus: {half_gpus} }}
  - {{ name: team-b, users: [bob], guaranteed_gpus: {half_gpus} }}
""" + (SOFTWARE_SECTION if software else "") + (MONITORING_SECTION if monitoring else "")


def run_once(binary: str, path: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one `toolkit plan --offline` process."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(binary, [binary, "plan", path, "--offline"])
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 2):
        sys.exit(f"toolkit plan failed on {path} with exit code {code}")
    return elapsed, usage.ru_maxrss / 1024.0


def main() -> None:
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    binaries = [("after", os.path.join(ROOT, "target", "release", "toolkit"))]
    if BEFORE:
        binaries.insert(0, ("before", BEFORE))
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        software_variants = [True, False] if SOFTWARE == "both" else [True]
        monitoring_variants = {"no": [False], "yes": [True], "both": [False, True]}[MONITORING]
        variants = [(s, m) for s in software_variants for m in monitoring_variants]
        for nodes in SIZES:
            for software, monitoring in variants:
                label = "yes" if software else "no"
                watched = "yes" if monitoring else "no"
                path = os.path.join(tmp, f"scale{nodes}-software-{label}-monitoring-{watched}.yaml")
                with open(path, "w") as f:
                    f.write(blueprint(nodes, software, monitoring))
                runs = {name: [] for name, _ in binaries}
                for _ in range(RUNS):
                    for name, binary in binaries:
                        runs[name].append(run_once(binary, path))
                for name, _ in binaries:
                    seconds = statistics.median(r[0] for r in runs[name])
                    peak = max(r[1] for r in runs[name])
                    which = f"  {name:<6}" if BEFORE else ""
                    tag = f" binary={name}" if BEFORE else ""
                    print(f"{nodes:>6} nodes {nodes * 8:>7} GPUs  software {label:<3} monitoring {watched:<3}{which}"
                          f"  median {seconds:7.3f} s  peak {peak:8.1f} MiB  ({peak / nodes * 1024:.1f} KiB/node)")
                    summary.append(f"plan_scale n={nodes} software={label} monitoring={watched} seconds={seconds:.3f}"
                                   f" peak_mib={peak:.1f}{tag}")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
