#!/usr/bin/python3
# toolkit: cluster-scope health checks, run by a systemd timer on the controller.
# Arguments: PLAN.json TEXTFILE_DIR. For every FRR switch of the plan, reads its FRR
# exporter's metrics over HTTP and counts the BGP sessions Established per neighbour
# (`peer_desc`: frr.conf describes each neighbour with the switch at its other end)
# against the cabling plan's links, so a session that is down or missing altogether
# (a peer removed from frr.conf has no series) fails. Writes toolkit_healthcheck_*
# metrics (cadence "cluster") to a temporary file in TEXTFILE_DIR, then renames it;
# their HELP texts are the node health program's, as node exporter merges the files.
import json
import os
import re
import sys
import time
import urllib.request

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def established(text):
    """Sessions up per peer_desc, from frr_bgp_peer_state samples (1 = Established)."""
    counts = {}
    for line in text.splitlines():
        if not line.startswith("frr_bgp_peer_state{"):
            continue
        labels, _, value = line.rpartition(" ")
        peer = dict(LABEL.findall(labels)).get("peer_desc", "")
        if float(value) == 1:
            counts[peer] = counts.get(peer, 0) + 1
    return counts


def check(switch):
    """(ok, sessions established, detail) of one switch."""
    try:
        with urllib.request.urlopen(switch["url"], timeout=10) as answer:
            counts = established(answer.read().decode())
    except Exception as error:  # the exporter down is a failure of the check, not of the run
        return 0, 0, "FRR exporter at %s does not answer: %s" % (switch["url"], error)
    short = ["%s %d of %d" % (peer, counts.get(peer, 0), planned)
             for peer, planned in sorted(switch["peers"].items()) if counts.get(peer, 0) < planned]
    up = sum(min(counts.get(peer, 0), planned) for peer, planned in switch["peers"].items())
    if short:
        return 0, up, "BGP sessions established to " + ", ".join(short)
    return 1, up, ""


def main():
    with open(sys.argv[1]) as plan_file:
        plan = json.load(plan_file)
    out = os.path.join(sys.argv[2], "toolkit_health_cluster.prom")
    now = int(time.time())
    results = []
    for switch in plan["switches"]:
        labels = 'node="%s",check="fabric-bgp",subject="%s",cadence="cluster",action="alert"' % (
            plan["node"], switch["name"])
        results.append((switch["name"], labels) + check(switch))
    # One family after the other, each after its HELP and TYPE; details as comments.
    lines = [
        "# HELP toolkit_healthcheck_ok 1 when the check met every limit on its last run, 0 when it failed.",
        "# TYPE toolkit_healthcheck_ok gauge",
    ]
    lines += ["toolkit_healthcheck_ok{%s} %d" % (labels, ok) for _, labels, ok, _, _ in results]
    lines += [
        "# HELP toolkit_healthcheck_last_run_timestamp_seconds When the check last ran, seconds since the epoch.",
        "# TYPE toolkit_healthcheck_last_run_timestamp_seconds gauge",
    ]
    lines += ["toolkit_healthcheck_last_run_timestamp_seconds{%s} %d" % (r[1], now) for r in results]
    lines += [
        "# HELP toolkit_healthcheck_measurement A measurement of a check, named as its validator names it.",
        "# TYPE toolkit_healthcheck_measurement gauge",
    ]
    lines += ['toolkit_healthcheck_measurement{%s,measurement="sessions_established"} %d' % (r[1], r[3])
              for r in results]
    lines += ["# toolkit:detail fabric-bgp %s %s" % (name, detail) for name, _, _, _, detail in results if detail]
    tmp = "%s.%d" % (out, os.getpid())
    with open(tmp, "w") as written:
        written.write("\n".join(lines) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
