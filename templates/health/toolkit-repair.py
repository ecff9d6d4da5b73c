#!/usr/bin/python3
# toolkit's repair service on the Slurm controller, rendered by `toolkit deploy` (edit the
# blueprint's monitoring.repair and validators/*.yaml, not this file).
#
#   toolkit-repair pass              one pass (toolkit-repair.timer)
#   toolkit-repair serve ADDR PORT   Alertmanager's webhook: each POST runs a pass
#   toolkit-repair decide            the decision alone: a JSON list of cases in, their actions out
#
# A pass reads every node from `scontrol -o show node` and the state file, decides (the
# same rules as toolkit's src/health/repair/decide.rs, which a test holds it to) and acts:
# a step only on a node drained and empty with toolkit's health reason; any other drain
# is never touched. The state is rewritten (temporary file, rename) after every change,
# so a controller restarted mid-ladder carries on.
import fcntl, json, os, re, shlex, ssl, subprocess, sys, time, urllib.request, base64

POLICY = "/etc/toolkit/repair/policy.json"
BMC_CREDENTIALS = "/etc/toolkit/repair/bmc.json"
RMA_HOOKS = "/etc/toolkit/repair/rma.d"
STATE = "/var/lib/toolkit/repair/state.json"
LOCK = "/run/toolkit-repair.lock"
METRICS = "/var/lib/prometheus/node-exporter/toolkit_repair.prom"
HEALTH_PREFIX = "toolkit:health"
RMA_PREFIX = "toolkit:rma"
DAY = 86400
HISTORY = 1000


def log(message):
    print(message, flush=True)


# ---- the decision (src/health/repair/decide.rs) ----

def flags(seen):
    return [re.sub(r"[^A-Za-z0-9_]+$", "", flag) for flag in seen["state"].split("+")]


def drained(seen):
    return "DRAIN" in flags(seen)


def drained_and_empty(seen):
    return drained(seen) and not any(f in ("ALLOCATED", "MIXED", "COMPLETING") for f in flags(seen))


def health_drain(seen):
    reason = seen.get("reason", "")
    if not reason.startswith(HEALTH_PREFIX + " "):
        return None
    rest = reason[len(HEALTH_PREFIX) + 1:]
    checks, _, detail = rest.partition(":")
    return [c.strip() for c in checks.split(",") if c.strip()], detail.strip()


def ladder(policy, check):
    steps = policy["ladders"].get(check) or []
    return steps or None


def decide(policy, observed, state, now):
    in_repair = len(state["nodes"])
    actions = []
    for seen in sorted(observed, key=lambda s: s["node"]):
        node = seen["node"]
        entry = state["nodes"].get(node)
        if entry is not None:
            actions.append(ongoing(policy, seen, entry, now))
            continue
        if seen.get("reason", "").startswith(RMA_PREFIX) or not drained(seen):
            continue
        held = health_drain(seen)
        if held is None:
            continue
        checks, detail = held
        found = next(((c, ladder(policy, c)) for c in checks if ladder(policy, c)), None)
        if found is None:
            actions.append({"action": "wait", "node": node,
                            "why": "no repair ladder for %s: left to people" % ",".join(checks)})
            continue
        check, steps = found
        if not drained_and_empty(seen):
            actions.append({"action": "wait", "node": node, "why": "draining: jobs still run"})
            continue
        recent = len([at for at in state["starts"].get(node, []) if at + DAY > now])
        if recent >= policy["max_repairs_per_day"]:
            why = "flapping: %d repairs in 24 h (max_repairs_per_day %d)" % (recent, policy["max_repairs_per_day"])
            actions.append({"action": "rma", "node": node, "check": check, "detail": detail, "why": why})
            continue
        if in_repair >= policy["max_in_repair"]:
            why = "budget: %d node(s) in repair (max_in_repair %d)" % (in_repair, policy["max_in_repair"])
            actions.append({"action": "wait", "node": node, "why": why})
            continue
        in_repair += 1
        if steps[0] != "rma":
            actions.append({"action": "start", "node": node, "check": check, "detail": detail, "step": steps[0]})
        else:
            actions.append({"action": "rma", "node": node, "check": check, "detail": detail,
                            "why": "the ladder has no step before rma"})
    return actions


def ongoing(policy, seen, entry, now):
    node = seen["node"]
    if not drained(seen):
        return {"action": "resolved", "node": node}
    if health_drain(seen) is None:
        return {"action": "released", "node": node, "why": "drained by someone else: `%s`" % seen.get("reason", "")}

    def rma(why):
        return {"action": "rma", "node": node, "check": entry["check"], "detail": entry["detail"], "why": why}

    taken = entry.get("steps") or []
    if (not taken or taken[-1]["step"] != entry["step"]) and drained_and_empty(seen):
        return {"action": "next", "node": node, "step": entry["step"]}

    if entry["outcome"] == "failed":
        if entry["step"] == "diagnose":
            return rma("diagnostics failed")
    elif now < entry["since"] + policy["settle_seconds"]:
        left = entry["since"] + policy["settle_seconds"] - now
        return {"action": "wait", "node": node, "why": "%s settling, %d s left" % (entry["step"], left)}
    if not drained_and_empty(seen):
        return {"action": "wait", "node": node, "why": "draining: jobs still run"}
    steps = ladder(policy, entry["check"]) or []
    at = steps.index(entry["step"]) + 1 if entry["step"] in steps else len(steps)
    if at < len(steps) and steps[at] != "rma":
        return {"action": "next", "node": node, "step": steps[at]}
    return rma("the ladder ended: %s did not bring it back" % entry["step"])


# ---- what Slurm shows ----

def observe():
    out = subprocess.run(["scontrol", "-o", "show", "node"], capture_output=True, text=True, timeout=60, check=True)
    nodes = []
    for line in out.stdout.splitlines():
        name = re.search(r"^NodeName=(\S+)", line)
        state = re.search(r" State=(\S+)", line)
        if not name or not state:
            continue
        seen = {"node": name.group(1), "state": state.group(1), "reason": "", "reason_time": None}
        reason = re.search(r" Reason=(.*?)(?: \[([^@\]]*)@([^\]]*)\])?\s*$", line)
        if reason:
            seen["reason"] = reason.group(1)
            if reason.group(3):
                try:
                    seen["reason_time"] = int(time.mktime(time.strptime(reason.group(3), "%Y-%m-%dT%H:%M:%S")))
                except ValueError:
                    pass
        nodes.append(seen)
    return nodes


# ---- state ----

def load_state():
    try:
        with open(STATE) as f:
            state = json.load(f)
    except FileNotFoundError:
        state = {}
    state.setdefault("version", 1)
    for key in ("nodes", "rma", "starts"):
        state.setdefault(key, {})
    state.setdefault("history", [])
    return state


def save_state(state):
    os.makedirs(os.path.dirname(STATE), exist_ok=True)
    temporary = STATE + ".tmp"
    with open(temporary, "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, STATE)


# ---- the steps ----

def run(argv, timeout):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        said = (done.stdout + done.stderr).strip().replace("\n", " ")[-300:]
        return done.returncode == 0, said
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, str(error)[-300:]


def on_node(node, command, timeout):
    # The controller's own root SSH to the node (its keys and known_hosts): a node
    # whose host key is unknown or changed is refused, not trusted.
    return run(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "root@" + node, command], timeout)


def relink(policy, node):
    rails = policy["rails"].get(node) or []
    if not rails:
        return "failed", "no rail interfaces"
    script = "; ".join("ip link set %s down && ip link set %s up" % (shlex.quote(r), shlex.quote(r)) for r in rails)
    ok, said = on_node(node, script, 60)
    return ("running" if ok else "failed"), said


def reboot(node):
    # As toolkit's rollout reboots: systemd a second later, so the command's status
    # comes back before sshd stops. Not `scontrol reboot`: slurmctld waits for the
    # kernel's boot time to change, which a container restart (the lab) never does.
    # The health reason stays, so the node's own checks resume it when they pass.
    command = "systemd-run --on-active=1 --timer-property=AccuracySec=100ms --description='toolkit repair: reboot' systemctl reboot"
    ok, said = on_node(node, command, 60)
    return ("running" if ok else "failed"), said


def redfish(access, credentials, path, body=None):
    context = ssl._create_unverified_context() if access.get("insecure") else ssl.create_default_context()
    url = access["endpoint"].rstrip("/") + path
    token = base64.b64encode(("%s:%s" % (credentials["username"], credentials["password"])).encode()).decode()
    request = urllib.request.Request(url, method="POST" if body is not None else "GET",
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": "Basic " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30, context=context) as answer:
        text = answer.read().decode() or "{}"
        return json.loads(text)


def power_cycle(policy, node):
    access = policy["bmcs"].get(node)
    if access is None:
        return "failed", "no BMC in the inventory"
    try:
        with open(BMC_CREDENTIALS) as f:
            credentials = json.load(f)[node]
        base = "" if access["endpoint"].rstrip("/").endswith("/redfish/v1") else "/redfish/v1"
        systems = redfish(access, credentials, base + "/Systems")
        system = systems["Members"][0]["@odata.id"]
        if not system.startswith("/redfish/v1"):
            system = base + system
        elif base == "":
            system = system[len("/redfish/v1"):]
        value = redfish(access, credentials, system)
        reset = value.get("Actions", {}).get("#ComputerSystem.Reset", {})
        allowed = reset.get("ResetType@Redfish.AllowableValues") or ["PowerCycle", "ForceRestart", "On"]
        off = value.get("PowerState") == "Off"
        wanted = ["On", "ForceOn"] if off else ["PowerCycle", "ForceRestart"]
        kind = next((k for k in wanted if k in allowed), None)
        if kind is None:
            return "failed", "the BMC allows no reset that restarts it (%s)" % ", ".join(allowed)
        target = reset.get("target") or (value["@odata.id"] + "/Actions/ComputerSystem.Reset")
        if base == "" and target.startswith("/redfish/v1"):
            target = target[len("/redfish/v1"):]
        redfish(access, credentials, target, {"ResetType": kind})
        return "running", kind
    except (OSError, KeyError, IndexError, ValueError) as error:
        return "failed", ("BMC: %s" % error)[-300:]


def diagnose(policy, node):
    command = policy["diagnose"].replace("{node}", shlex.quote(node))
    ok, said = run(["sh", "-c", command], 3600)
    return ("passed" if ok else "failed"), said


def take(policy, node, step, entry, now):
    if step == "relink":
        outcome, note = relink(policy, node)
    elif step == "reboot":
        outcome, note = reboot(node)
    elif step == "power-cycle":
        outcome, note = power_cycle(policy, node)
    elif step == "diagnose":
        outcome, note = diagnose(policy, node)
    else:
        outcome, note = "failed", "unknown step"
    entry["outcome"] = outcome
    entry["steps"].append({"step": step, "at": now, "outcome": outcome, "note": note})
    log("%s: %s %s%s" % (node, step, outcome, (": " + note) if note else ""))


def rma_reason(check, detail):
    reason = ("%s %s: %s" % (RMA_PREFIX, check, detail)).replace('"', "").replace("\n", "")
    return reason.encode()[:200].decode(errors="ignore")


def enter_rma(state, node, action, entry, drained_at, now):
    # The seam the RMA report hangs on: the reason, the record, and every executable in
    # rma.d called with the node's name and its record as JSON on stdin.
    reason = rma_reason(action["check"], action["detail"])
    ok, said = run(["scontrol", "update", "nodename=" + node, "state=drain", "reason=" + reason], 60)
    if not ok:
        log("%s: could not set the RMA reason: %s" % (node, said))
        return
    record = {"check": action["check"], "detail": action["detail"], "why": action["why"], "since": now,
              "drained_at": drained_at, "steps": entry["steps"] if entry else []}
    state["rma"][node] = record
    state["nodes"].pop(node, None)
    finish(state, node, action["check"], "rma", drained_at, now, record["steps"])
    save_state(state)
    log("%s: RMA (%s): %s" % (node, action["why"], reason))
    if os.path.isdir(RMA_HOOKS):
        for hook in sorted(os.listdir(RMA_HOOKS)):
            path = os.path.join(RMA_HOOKS, hook)
            if os.access(path, os.X_OK) and not os.path.isdir(path):
                try:
                    subprocess.run([path, node], input=json.dumps(record), text=True, timeout=600)
                except (OSError, subprocess.TimeoutExpired) as error:
                    log("%s: RMA hook %s: %s" % (node, hook, error))


def finish(state, node, check, outcome, drained_at, now, steps):
    done = {"node": node, "check": check, "outcome": outcome, "drained_at": drained_at, "ended": now, "steps": steps}
    if outcome == "resumed":
        done["mttr_seconds"] = max(0, now - drained_at)
    state["history"] = (state["history"] + [done])[-HISTORY:]


def one_pass():
    with open(POLICY) as f:
        policy = json.load(f)
    os.makedirs(os.path.dirname(LOCK), exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load_state()
        now = int(time.time())
        for node in list(state["starts"]):
            state["starts"][node] = [at for at in state["starts"][node] if at + DAY > now]
            if not state["starts"][node]:
                del state["starts"][node]
        observed = observe()
        by_name = {seen["node"]: seen for seen in observed}
        for node in list(state["rma"]):
            seen = by_name.get(node)
            if seen is not None and not seen["reason"].startswith(RMA_PREFIX):
                # Resumed or re-drained by people after the ticket: no longer toolkit's.
                del state["rma"][node]
        for action in decide(policy, observed, state, now):
            node = action["node"]
            seen = by_name[node]
            entry = state["nodes"].get(node)
            kind = action["action"]
            if kind == "wait":
                continue
            if kind == "start":
                drained_at = seen["reason_time"] or now
                entry = {"check": action["check"], "detail": action["detail"], "step": action["step"],
                         "outcome": "running", "since": now, "drained_at": drained_at, "steps": []}
                state["nodes"][node] = entry
                state["starts"].setdefault(node, []).append(now)
                save_state(state)
                take(policy, node, action["step"], entry, now)
                entry["since"] = int(time.time())
            elif kind == "next":
                entry.update({"step": action["step"], "outcome": "running", "since": now})
                save_state(state)
                take(policy, node, action["step"], entry, now)
                entry["since"] = int(time.time())
            elif kind == "rma":
                drained_at = entry["drained_at"] if entry else (seen["reason_time"] or now)
                enter_rma(state, node, action, entry, drained_at, now)
                continue
            elif kind == "resolved":
                finish(state, node, entry["check"], "resumed", entry["drained_at"], now, entry["steps"])
                del state["nodes"][node]
                log("%s: resumed by its checks, %d s after the drain" % (node, now - entry["drained_at"]))
            elif kind == "released":
                finish(state, node, entry["check"], "released", entry["drained_at"], now, entry["steps"])
                del state["nodes"][node]
                log("%s: let go, %s" % (node, action["why"]))
            save_state(state)
        metrics(state, now)


def metrics(state, now):
    lines = ["# HELP toolkit_repair_in_repair 1 for a node on its repair ladder, by its step.",
             "# TYPE toolkit_repair_in_repair gauge"]
    for node, entry in sorted(state["nodes"].items()):
        lines.append('toolkit_repair_in_repair{node="%s",check="%s",step="%s"} 1' % (node, entry["check"], entry["step"]))
    lines += ["# HELP toolkit_repair_rma 1 for a node left drained for a hardware ticket.",
              "# TYPE toolkit_repair_rma gauge"]
    for node, entry in sorted(state["rma"].items()):
        lines.append('toolkit_repair_rma{node="%s",check="%s"} 1' % (node, entry["check"]))
    lines += ["# HELP toolkit_repair_last_mttr_seconds Drain to resume of the node's last repair.",
              "# TYPE toolkit_repair_last_mttr_seconds gauge"]
    last = {}
    for done in state["history"]:
        if "mttr_seconds" in done:
            last[done["node"]] = done["mttr_seconds"]
    for node, seconds in sorted(last.items()):
        lines.append('toolkit_repair_last_mttr_seconds{node="%s"} %d' % (node, seconds))
    lines += ["# HELP toolkit_repair_pass_timestamp_seconds When the repair service last looked.",
              "# TYPE toolkit_repair_pass_timestamp_seconds gauge", "toolkit_repair_pass_timestamp_seconds %d" % now]
    directory = os.path.dirname(METRICS)
    if os.path.isdir(directory):
        temporary = os.path.join(directory, ".toolkit_repair.prom.tmp")
        with open(temporary, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, METRICS)


def serve(address, port):
    import http.server

    class Webhook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.end_headers()
            self.wfile.flush()
            try:
                one_pass()
            except Exception as error:  # one failed pass must not stop the receiver
                log("pass failed: %s" % error)

        def log_message(self, *args):
            pass

    http.server.HTTPServer((address, int(port)), Webhook).serve_forever()


def main(argv):
    if argv[1:2] == ["pass"]:
        one_pass()
    elif argv[1:2] == ["serve"] and len(argv) == 4:
        serve(argv[2], argv[3])
    elif argv[1:2] == ["decide"]:
        decided = []
        for case in json.load(sys.stdin):
            state = case["state"]
            for key in ("nodes", "rma", "starts"):
                state.setdefault(key, {})
            decided.append(decide(case["policy"], case["observed"], state, case["now"]))
        json.dump(decided, sys.stdout)
    else:
        print(__doc__ or "usage: toolkit-repair pass | serve ADDR PORT | decide", file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
