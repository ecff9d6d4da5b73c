#!/usr/bin/python3
# toolkit: cabling against the plan, run by a systemd timer on a switch.
# Arguments: PLAN.json TEXTFILE_DIR STATE.json. Reads lldpd's neighbours
# (`lldpcli -f json0 show neighbors`: json0 keeps one shape whatever the count) and
# compares, port by port, the neighbour each planned port sees with the one the plan
# puts there (PLAN.json, rendered by toolkit from the model). Neighbours are named by
# the cabling validator's rule (src/topology/lldp.rs, `LldpPlan::remote_end`): a rail
# MAC the inventory lists, else the system name (or its short name) with the port
# description or port id that is a known port of that device. A leaf that bridges its
# node ports reports them on one interface (plan "bridge"): a node port's planned
# neighbour counts as seen there (plan "bridge" null on a switch without node ports).
#
# Grace: a neighbour whose LLDP data changed less than "grace" seconds ago (a peer
# just booted, renamed or recabled) and a port without its neighbour for less than
# that (STATE.json keeps since when) are not failures yet, only warnings.
#
# Writes toolkit_healthcheck_* metrics (check "cabling", subject the port, cadence
# "cluster", action "alert") to a temporary file in TEXTFILE_DIR, then renames it;
# the HELP texts are the node health program's.
import json
import os
import re
import subprocess
import sys
import time

AGE = re.compile(r"(\d+) days?, (\d+):(\d+):(\d+)")


def first(items, key):
    """json0 wraps each value in a list of {"value": ...}."""
    for item in items.get(key) or []:
        return item.get("value") if isinstance(item, dict) else item
    return None


def neighbours():
    """(local interface, system name, chassis id, port id, port description, age s)."""
    answer = subprocess.run(["lldpcli", "-f", "json0", "show", "neighbors"], capture_output=True, text=True,
                            timeout=20, check=True)
    found = []
    for section in json.loads(answer.stdout).get("lldp") or []:
        for interface in section.get("interface") or []:
            chassis = (interface.get("chassis") or [{}])[0]
            port = (interface.get("port") or [{}])[0]
            chassis_id = (chassis.get("id") or [{}])[0].get("value")
            port_id = (port.get("id") or [{}])[0].get("value")
            age = AGE.match(interface.get("age") or "")
            seconds = (int(age.group(1)) * 86400 + int(age.group(2)) * 3600 + int(age.group(3)) * 60
                       + int(age.group(4))) if age else None
            found.append((interface.get("name") or "", first(chassis, "name"), chassis_id, port_id,
                          first(port, "descr"), seconds))
    return found


def is_port(ports, name):
    """Whether `name` is one of a device's ports: `Ports::contains`."""
    if isinstance(ports, dict):
        number = name[len(ports["prefix"]):] if name.startswith(ports["prefix"]) else ""
        return (number.isascii() and number.isdigit() and not number.startswith("0")
                and int(number) <= ports["count"])
    return name in ports


def remote_end(plan, system, chassis_id, port_id, descr):
    """The neighbour as the plan names it: `LldpPlan::remote_end`."""
    if port_id is not None and port_id.lower() in plan["macs"]:
        end = plan["macs"][port_id.lower()]
        return end["device"], end["port"]
    system = system or ""
    short = system.split(".")[0]
    if system in plan["devices"]:
        device = system
    elif short in plan["devices"]:
        device = short
    elif system:
        device = system
    else:
        device = chassis_id or "an unnamed device"
    known = plan["devices"].get(device, [])
    for candidate in (descr, port_id):
        if candidate is not None and is_port(known, candidate):
            return device, candidate
    return device, descr if descr is not None else port_id if port_id is not None else "?"


def verdicts(plan, seen, missing_since, now):
    """(port, ok, warning, detail) per planned port; updates missing_since."""
    grace = plan["grace"]
    on = {}
    for local, end, age in seen:
        on.setdefault(local, []).append((end, age))
    expected_here = {(port["expected"]["device"], port["expected"]["port"]) for port in plan["ports"]}
    bridge = on.get(plan["bridge"], []) if plan["bridge"] else []
    bridged = [(end, age) for end, age in bridge if end not in expected_here]
    results = []
    for port in plan["ports"]:
        name = port["port"]
        expected = (port["expected"]["device"], port["expected"]["port"])
        there = on.get(name, [])
        if any(end == expected for end, _ in there + bridge):
            missing_since.pop(name, None)
            results.append((name, 1, 0, ""))
            continue
        want = "%s: expected %s %s" % ((name,) + expected)
        others = there or bridged
        if others:
            missing_since.pop(name, None)
            where = "" if there else " on %s" % plan["bridge"]
            detail = "%s, seen%s %s" % (want, where, ", ".join("%s %s" % end for end, _ in others))
            young = [age for _, age in others if age is not None and age < grace]
            if young:
                results.append((name, 1, 1, "%s (changed %d s ago, within the %d s grace)" % (detail, min(young), grace)))
            else:
                results.append((name, 0, 0, detail))
            continue
        since = missing_since.setdefault(name, now)
        detail = want + ", no neighbour"
        if now - since < grace:
            results.append((name, 1, 1, "%s (for %d s, within the %d s grace)" % (detail, now - since, grace)))
        else:
            results.append((name, 0, 0, detail))
    return results


def write(path, text):
    tmp = "%s.%d" % (path, os.getpid())
    with open(tmp, "w") as written:
        written.write(text)
    os.replace(tmp, path)


def main():
    with open(sys.argv[1]) as plan_file:
        plan = json.load(plan_file)
    out = os.path.join(sys.argv[2], "toolkit_health_cluster.prom")
    state_path = sys.argv[3]
    try:
        with open(state_path) as state_file:
            missing_since = json.load(state_file)
    except (OSError, ValueError):
        missing_since = {}
    now = int(time.time())
    try:
        seen = [(local, remote_end(plan, system, chassis, port_id, descr), age)
                for local, system, chassis, port_id, descr, age in neighbours()]
        results = verdicts(plan, seen, missing_since, now)
    except Exception as error:  # lldpd down or unreadable fails every port, not the run
        why = str(error).strip().splitlines()[-1:] or [type(error).__name__]
        results = [(port["port"], 0, 0, "%s: lldpd's neighbours unreadable: %s" % (port["port"], why[0]))
                   for port in plan["ports"]]
    write(state_path, json.dumps(missing_since, sort_keys=True) + "\n")
    labels = ['node="%s",check="cabling",subject="%s",cadence="cluster",action="alert"' % (plan["switch"], port)
              for port, _, _, _ in results]
    lines = [
        "# HELP toolkit_healthcheck_ok 1 when the check met every limit on its last run, 0 when it failed.",
        "# TYPE toolkit_healthcheck_ok gauge",
    ]
    lines += ["toolkit_healthcheck_ok{%s} %d" % (label, ok) for label, (_, ok, _, _) in zip(labels, results)]
    lines += [
        "# HELP toolkit_healthcheck_warning 1 when the check missed a warning limit on its last run.",
        "# TYPE toolkit_healthcheck_warning gauge",
    ]
    lines += ["toolkit_healthcheck_warning{%s} %d" % (label, warn) for label, (_, _, warn, _) in zip(labels, results)]
    lines += [
        "# HELP toolkit_healthcheck_last_run_timestamp_seconds When the check last ran, seconds since the epoch.",
        "# TYPE toolkit_healthcheck_last_run_timestamp_seconds gauge",
    ]
    lines += ["toolkit_healthcheck_last_run_timestamp_seconds{%s} %d" % (label, now) for label in labels]
    lines += ["# toolkit:detail cabling %s %s" % (port, detail) for port, _, _, detail in results if detail]
    write(out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
