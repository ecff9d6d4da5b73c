"""A Kubernetes API server stand-in for the server-side-apply client's tests (tests/it/kube_api.rs).

No real API server can run on the test machines (no container images), so this answers the
few requests toolkit makes the way kube-apiserver does, with the response shapes recorded in
tests/support/kube-responses/ (each body cites where its format comes from, SOURCE.md):

- GET object: 200 + the object with server fields (uid, resourceVersion, creationTimestamp,
  managedFields); 404 `Status` with details for a missing object; 404 without details for a
  kind the server does not serve (a CRD not installed).
- GET collection with `labelSelector=k=v`: a `<Kind>List`.
- PATCH `application/apply-patch+yaml` with `fieldManager` (+ `force`, `dryRun=All`):
  201 created / 200 applied, with field ownership as structured-merge-diff keeps it (every
  leaf owned by its managers, lists atomic as in CRDs without list markers): a value another
  manager owns and the applier changes is a 409 `FieldManagerConflict` naming manager and
  field unless forced; fields the applier stops sending and nobody else owns are removed.
  Before persisting, the object is validated: Kueue kinds against their CRD's OpenAPI schema
  (python `jsonschema`) plus Topology's CEL rules, core kinds with `kubernetes-validate`;
  failures are a 422 `Invalid` with one cause per field.
- PATCH `application/merge-patch+json` (RFC 7386, what `kubectl patch --type merge` sends): the
  patch merged into the object, `null` removing a key; a `metadata.resourceVersion` in the patch
  is a precondition (409 `Conflict` when the object changed since, as `errors.NewConflict`).
- Nodes' own credentials (a client certificate `CN=system:node:NAME`) as the Node authorizer
  (plugin/pkg/auth/authorizer/node/node_authorizer.go, `authorizeNode`) and the NodeRestriction
  admission plugin (plugin/pkg/admission/noderestriction/admission.go, `admitNode`) treat them:
  get and patch of their own Node only, and a patch that changes `spec.taints` is forbidden.
- Discovery (`/api`, `/apis`, `/api/v1`, `/apis/GROUP/VERSION`) in the legacy format, for kubectl.
- DELETE: 200 `Status` Success with details; 404 when absent. Deleting a Job deletes its pods
  (the garbage collector's work for `propagationPolicy=Background`).
- Jobs (batch/v1, validated with `kubernetes-validate`) and MPIJobs (kubeflow.org/v2beta1, against
  the mpi-operator's CRD given with `--crds`; the launcher's pod carries the log) run as the Job controller and kubelet
  would report them: `--job-seconds` after creation the Job gets one pod (labels `job-name`,
  `batch.kubernetes.io/job-name`, `controller-uid`) that terminated with the exit code given,
  and the conditions the Job controller sets (`SuccessCriteriaMet` + `Complete`, or
  `FailureTarget` + `Failed` with `BackoffLimitExceeded`). The pod's log
  (`GET /api/v1/namespaces/NS/pods/NAME/log?container=C`, text/plain) is a recorded file chosen
  by the Job's `toolkit.io/validator` and `toolkit.io/node` labels: `--job-log
  VALIDATOR[@NODE]=FILE:EXIT`. `--job-hang VALIDATOR` leaves its Jobs running forever.
- Auth: bearer tokens (`--token`, repeatable) and/or client certificates signed by
  `--client-ca`; anything else is 401. `--forbid VERB:PLURAL` answers 403 as RBAC would.

Every request is appended to `--log` as one JSON line (method, path, query, content type,
how it authenticated, body), so the tests check what toolkit sent.

Usage: kube_apiserver.py --port N [--crds DIR]... [--cert C --key K] [--client-ca CA] [--token T]...
       [--seed seed.json] [--log requests.jsonl] [--forbid patch:clusterqueues] [--k8s-version 1.33]
       [--job-log VALIDATOR[@NODE]=FILE:EXIT]... [--job-hang VALIDATOR]... [--job-seconds S]
"""

import argparse
import copy
import datetime
import glob
import http.server
import json
import os
import ssl
import threading
from time import monotonic
import urllib.parse
import uuid

import jsonschema
import yaml

CORE = {  # plural: (kind, namespaced)
    "namespaces": ("Namespace", False),
    "nodes": ("Node", False),
    "configmaps": ("ConfigMap", True),
    "pods": ("Pod", True),
}
IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code, reason, message, details=None):
    """A metav1.Status as apimachinery's errors.go builds it (details left out when nil)."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details is not None:
        body["details"] = details
    return code, body


def leaves(value, prefix=()):
    """Paths of the leaves of an object: maps recurse, lists and scalars are leaves."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, prefix + (key,))
    else:
        yield prefix, value


def get_path(obj, path):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def set_path(obj, path, value):
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = copy.deepcopy(value)


def del_path(obj, path):
    parents = []
    for key in path[:-1]:
        if not isinstance(obj, dict) or key not in obj:
            return
        parents.append((obj, key))
        obj = obj[key]
    obj.pop(path[-1], None)
    for parent, key in reversed(parents):  # drop maps the removal emptied
        if parent[key] == {}:
            del parent[key]


def dotted(path):
    return "".join("." + key for key in path)


def fields_v1(paths):
    tree = {}
    for path in paths:
        node = tree
        for key in path:
            node = node.setdefault("f:" + key, {})
    return tree


class Store:
    def __init__(self, crds, version):
        self.lock = threading.Lock()
        self.objects = {}  # (group, plural, namespace, name) -> {"object", "owners": {path: {manager}}, "ops": {manager: (op, apiVersion)}}
        self.kinds = {}  # (group, version, plural) -> {"kind", "namespaced", "schema"}
        self.version = version
        self.next_version = 1000
        for plural, (kind, namespaced) in CORE.items():
            self.kinds[("", "v1", plural)] = {"kind": kind, "namespaced": namespaced, "schema": None}
        self.kinds[("batch", "v1", "jobs")] = {"kind": "Job", "namespaced": True, "schema": None}
        self.job_started = {}  # (group, plural, namespace, name) of a Job or MPIJob -> monotonic time of creation
        for path in sorted(path for folder in crds for path in glob.glob(os.path.join(folder, "*.yaml"))):
            with open(path) as handle:
                crd = yaml.safe_load(handle)
            spec = crd["spec"]
            for served in spec["versions"]:
                if served.get("served"):
                    self.kinds[(spec["group"], served["name"], spec["names"]["plural"])] = {
                        "kind": spec["names"]["kind"], "namespaced": spec["scope"] == "Namespaced",
                        "schema": served["schema"]["openAPIV3Schema"]}

    def resource_version(self):
        self.next_version += 1
        return str(self.next_version)


def validate(store, info, group, obj):
    """Causes for a 422 ([] when valid): schema errors, and the Topology CEL rules."""
    causes = []
    if info["schema"] is not None:
        validator = jsonschema.Draft7Validator(info["schema"])
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
            field = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in error.absolute_path).replace(".[", "[")
            if error.validator == "required":
                missing = error.message.split("'")[1]
                causes.append({"reason": "FieldValueRequired", "message": "Required value",
                               "field": f"{field}.{missing}" if field else missing})
            elif error.validator == "enum":
                allowed = ", ".join(f'"{value}"' for value in error.validator_value)
                causes.append({"reason": "FieldValueNotSupported",
                               "message": f"Unsupported value: {json.dumps(error.instance)}: supported values: {allowed}",
                               "field": field})
            else:
                causes.append({"reason": "FieldValueInvalid",
                               "message": f"Invalid value: {json.dumps(error.instance)}: {error.message}", "field": field})
        if info["kind"] == "Topology":  # x-kubernetes-validations of kueue.x-k8s.io_topologies.yaml
            labels = [level.get("nodeLabel") for level in obj.get("spec", {}).get("levels", [])]
            if len(set(labels)) != len(labels):
                causes.append({"reason": "FieldValueInvalid",
                               "message": "Invalid value: \"array\": must be unique", "field": "spec.levels"})
            if "kubernetes.io/hostname" in labels[:-1]:
                causes.append({"reason": "FieldValueInvalid",
                               "message": "Invalid value: \"array\": the kubernetes.io/hostname label can only be used at the lowest level of topology",
                               "field": "spec.levels"})
    else:
        import kubernetes_validate
        try:
            kubernetes_validate.validate(obj, store.version, strict=True)
        except kubernetes_validate.ValidationError as error:
            field = ".".join(str(p) for p in error.path)
            causes.append({"reason": "FieldValueInvalid", "message": f"Invalid value: {error.message}", "field": field})
    return causes


def managed_fields(entry):
    out = []
    for manager, (operation, api_version, time) in sorted(entry["ops"].items()):
        paths = [path for path, owners in entry["owners"].items() if manager in owners]
        if paths:
            out.append({"manager": manager, "operation": operation, "apiVersion": api_version, "time": time,
                        "fieldsType": "FieldsV1", "fieldsV1": fields_v1(sorted(paths))})
    return out


def shown(entry):
    obj = copy.deepcopy(entry["object"])
    obj.pop("_log", None)
    obj["metadata"]["managedFields"] = managed_fields(entry)
    return obj


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def reply_text(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def user(self):
        header = self.headers.get("Authorization", "")
        if header.startswith("Bearer ") and header[7:] in self.server.tokens:
            return "bearer", "token-user"
        cert = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        if cert:
            subject = dict(item[0] for item in cert["subject"])
            return "client-certificate", subject.get("commonName", "")
        return "none", None

    def handle_any(self, method):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        auth, user = self.user()
        with open(self.server.log, "a") as log:
            log.write(json.dumps({"method": method, "path": url.path, "query": query, "auth": auth,
                                  "content_type": self.headers.get("Content-Type"),
                                  "body": json.loads(raw) if raw else None}) + "\n")
        if user is None:
            return self.reply(*status(401, "Unauthorized", "Unauthorized"))
        with self.server.store.lock:
            run_jobs(self.server)
            if method == "GET" and url.path.endswith("/log"):
                code, body = pod_log(self.server, url.path, query)
                if code == 200:
                    return self.reply_text(code, body)
                return self.reply(code, body)
            answer = discovery(self.server.store, url.path) if method == "GET" else None
            code, body = answer or route(self.server, method, url.path, query, raw, user,
                                         self.headers.get("Content-Type"))
        self.reply(code, body)

    def do_GET(self):
        self.handle_any("GET")

    def do_PATCH(self):
        self.handle_any("PATCH")

    def do_DELETE(self):
        self.handle_any("DELETE")


def parse_path(path):
    """(group, version, namespace, plural, name) of a REST path; None when it is not one."""
    parts = [part for part in path.split("/") if part]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if len(rest) not in (1, 2):
        return None
    return group, version, namespace, rest[0], rest[1] if len(rest) == 2 else None


def discovery(store, path):
    """The legacy discovery documents kubectl reads before a request (None: not one of them)."""
    parts = [part for part in path.split("/") if part]
    groups = sorted({(g, v) for (g, v, _) in store.kinds if g})
    if parts == ["api"]:
        return 200, {"kind": "APIVersions", "versions": ["v1"],
                     "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
    if parts == ["apis"]:
        listed = []
        for name in sorted({g for g, _ in groups}):
            versions = [{"groupVersion": f"{name}/{v}", "version": v} for g, v in groups if g == name]
            listed.append({"name": name, "versions": versions, "preferredVersion": versions[0]})
        return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed}
    if parts == ["api", "v1"] or (len(parts) == 3 and parts[0] == "apis"):
        group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
        resources = [{"name": plural, "singularName": info["kind"].lower(), "namespaced": info["namespaced"],
                      "kind": info["kind"], "verbs": ["get", "list", "patch", "delete"]}
                     for (g, v, plural), info in sorted(store.kinds.items()) if (g, v) == (group, version)]
        if not resources:
            return None
        return 200, {"kind": "APIResourceList", "apiVersion": "v1",
                     "groupVersion": f"{group}/{version}" if group else version, "resources": resources}
    return None


def merge_patch(target, patch):
    """RFC 7386: maps merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def node_denied(user, verb, plural, name, before, after):
    """What the Node authorizer and NodeRestriction refuse a kubelet's own credentials (None: allowed)."""
    if not (user or "").startswith("system:node:") or plural != "nodes":
        return None
    node = user[len("system:node:"):]
    if verb in ("get", "list") and name != node:  # node_authorizer.go authorizeNode
        return (f'nodes "{name or ""}" is forbidden: User "{user}" cannot {verb} resource "nodes" in API group "" '
                f"at the cluster scope: node '{node}' cannot read '{name or 'all nodes'}', only its own Node object")
    if verb == "patch" and name != node:  # admission.go admitNode
        return f'nodes "{name}" is forbidden: node "{node}" is not allowed to modify node "{name}"'
    if verb == "patch" and (before.get("spec") or {}).get("taints") != (after.get("spec") or {}).get("taints"):
        return f'nodes "{name}" is forbidden: node "{node}" is not allowed to modify taints'
    return None


def route(server, method, path, query, raw, user, content_type):
    store = server.store
    parsed = parse_path(path)
    info = store.kinds.get(parsed[:2] + (parsed[3],)) if parsed else None
    if info is None:  # not_found_handler.go: no details
        return status(404, "NotFound", "the server could not find the requested resource")
    group, version, namespace, plural, name = parsed
    resource = f"{plural}.{group}" if group else plural
    details = {"name": name, "group": group, "kind": plural} if group else {"name": name, "kind": plural}
    verb = {"GET": "get" if name else "list", "PATCH": "patch", "DELETE": "delete"}[method]
    if f"{verb}:{plural}" in server.forbid:  # authorization's forbidden message (errors.NewForbidden)
        scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        return status(403, "Forbidden",
                      f'{resource} "{name}" is forbidden: User "{user}" cannot {verb} resource "{plural}" in API group "{group}" {scope}',
                      details)
    key = (group, plural, namespace, name)
    entry = store.objects.get(key)
    if method == "GET":
        denied = node_denied(user, verb, plural, name, {}, {})
        if denied:
            return status(403, "Forbidden", denied, details)
    if method == "GET" and name is None:
        selector = query.get("labelSelector", "")
        want = dict(part.split("=", 1) for part in selector.split(",") if "=" in part)
        items = [shown(e) for (g, p, _, _), e in sorted(store.objects.items(), key=lambda item: str(item[0]))
                 if g == group and p == plural
                 and all(e["object"]["metadata"].get("labels", {}).get(k) == v for k, v in want.items())]
        return 200, {"kind": info["kind"] + "List", "apiVersion": f"{group}/{version}" if group else version,
                     "metadata": {"resourceVersion": str(store.next_version)}, "items": items}
    if method == "GET":
        if entry is None:
            return status(404, "NotFound", f'{resource} "{name}" not found', details)
        return 200, shown(entry)
    if method == "DELETE":
        if entry is None:
            return status(404, "NotFound", f'{resource} "{name}" not found', details)
        if query.get("dryRun") != "All":
            del store.objects[key]
            if plural in ("jobs", "mpijobs"):  # the garbage collector removes the Job's pods
                label = "job-name" if plural == "jobs" else "training.kubeflow.org/job-name"
                for pod_key in [k for k, e in store.objects.items() if k[1] == "pods" and k[2] == namespace
                                and e["object"]["metadata"].get("labels", {}).get(label) == name]:
                    del store.objects[pod_key]
                store.job_started.pop(key, None)
        gone = dict(details, uid=entry["object"]["metadata"]["uid"])
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": gone}
    # PATCH
    if "merge-patch+json" in (content_type or ""):
        if entry is None:
            return status(404, "NotFound", f'{resource} "{name}" not found', details)
        patch = json.loads(raw)
        before = entry["object"]
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != before["metadata"]["resourceVersion"]:  # errors.go NewConflict
            return status(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": the object has been '
                          "modified; please apply your changes to the latest version and try again", details)
        after = merge_patch(before, patch)
        denied = node_denied(user, verb, plural, name, before, after)
        if denied:
            return status(403, "Forbidden", denied, details)
        after["metadata"]["resourceVersion"] = store.resource_version()
        entry["object"] = after
        return 200, shown(entry)
    if "apply-patch" not in (content_type or ""):
        return status(415, "UnsupportedMediaType", 'the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml')
    manager = query.get("fieldManager")
    if not manager:
        return status(400, "BadRequest", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
    if namespace and ("", "namespaces", None, namespace) not in store.objects:
        return status(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"})
    applied = yaml.safe_load(raw)
    if applied.get("metadata", {}).get("name") != name or applied.get("kind") != info["kind"]:
        return status(400, "BadRequest", "the name of the object does not match the name on the URL")
    force = query.get("force") == "true"
    dry_run = query.get("dryRun") == "All"
    api_version = applied["apiVersion"]
    paths = {p: v for p, v in leaves(applied) if p not in IDENTITY and p}
    if entry is None:
        work = {"object": copy.deepcopy(applied), "owners": {}, "ops": {}}
        meta = work["object"]["metadata"]
        meta.update({"uid": str(uuid.uuid4()), "creationTimestamp": now()})
        created = True
    else:
        work = copy.deepcopy(entry)
        created = False
        conflicts = []
        for p, value in paths.items():
            others = work["owners"].get(p, set()) - {manager}
            if others and get_path(work["object"], p) != value:
                conflicts.append((p, sorted(others)))
        if conflicts and not force:  # conflict.go: one cause per (manager, field)
            causes, by_manager = [], {}
            for p, others in conflicts:
                for other in others:
                    op, other_version, time = work["ops"][other]
                    who = f'"{other}"' if op == "Apply" else f'"{other}" using {other_version}'
                    causes.append({"reason": "FieldManagerConflict", "message": f"conflict with {who}", "field": dotted(p)})
                    by_manager.setdefault(who, []).append(dotted(p))
            if len(causes) == 1:
                message = f"Apply failed with 1 conflict: {causes[0]['message']}: {causes[0]['field']}"
            else:
                parts = []
                for who, fields in by_manager.items():
                    if len(fields) == 1:
                        parts.append(f"conflict with {who}: {fields[0]}")
                    else:
                        parts.append(f"conflicts with {who}:\n" + "\n".join(f"- {f}" for f in fields))
                message = f"Apply failed with {len(causes)} conflicts: " + "\n".join(parts)
            return status(409, "Conflict", message, {"causes": causes})
        for p, _ in conflicts:
            work["owners"][p] = set()
        for p in [p for p, owners in work["owners"].items() if manager in owners and p not in paths]:
            work["owners"][p].discard(manager)
            if not work["owners"][p]:
                del work["owners"][p]
                del_path(work["object"], p)
        for p, value in paths.items():
            set_path(work["object"], p, value)
    for p in paths:
        work["owners"].setdefault(p, set()).add(manager)
    work["ops"][manager] = ("Apply", api_version, now())
    candidate = copy.deepcopy(work["object"])
    candidate["metadata"].pop("managedFields", None)
    check = {k: v for k, v in candidate.items()}
    check["metadata"] = {k: v for k, v in candidate["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
    causes = validate(store, info, group, check)
    if causes:
        kind = f"{info['kind']}.{group}" if group else info["kind"]
        listed = [f"{c['field']}: {c['message']}" for c in causes]
        joined = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
        invalid = {"name": name, "kind": info["kind"], "causes": causes}
        if group:
            invalid["group"] = group
        return status(422, "Invalid", f'{kind} "{name}" is invalid: {joined}', invalid)
    changed = created or entry is None or strip(entry["object"]) != strip(work["object"])
    if changed:
        work["object"]["metadata"]["resourceVersion"] = store.resource_version()
    if not dry_run:
        store.objects[key] = work
        if created and plural in ("jobs", "mpijobs"):
            store.job_started[key] = monotonic()
    return (201 if created else 200), shown(work)


def run_jobs(server):
    """Finishes the Jobs and MPIJobs created `--job-seconds` ago: a pod (an MPIJob's launcher)
    with the recorded log and exit code, and the status their controllers write (the Job
    controller, pkg/controller/job/job_controller.go; the mpi-operator,
    pkg/controller/mpi_job_controller{,_status}.go)."""
    store = server.store
    for key, started in list(store.job_started.items()):
        group, plural, namespace, name = key
        entry = store.objects.get(key)
        if entry is None or monotonic() - started < server.job_seconds:
            continue
        job = entry["object"]
        labels = job["metadata"].get("labels", {})
        validator, node = labels.get("toolkit.io/validator", ""), labels.get("toolkit.io/node", "")
        if validator in server.job_hang:
            continue
        del store.job_started[key]
        recorded = server.job_logs.get(f"{validator}@{node}") or server.job_logs.get(validator)
        if recorded is None:
            log, code = f"stand-in: no recorded output for {validator} on {node}\n", 127
        else:
            path, code = recorded
            with open(path) as handle:
                log = handle.read()
        stamp = now()
        uid = job["metadata"]["uid"]
        if plural == "jobs":
            template = job["spec"]["template"]
            pod_name = f"{name}-{uuid.uuid4().hex[:5]}"
            pod_labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                          "controller-uid": uid, "job-name": name}
            owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}
        else:  # the launcher's pod, of the launcher Job `<name>-launcher`
            template = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
            launcher = f"{name}-launcher"
            pod_name = f"{launcher}-{uuid.uuid4().hex[:5]}"
            launcher_uid = str(uuid.uuid4())
            pod_labels = {"training.kubeflow.org/operator-name": "mpi-operator",
                          "training.kubeflow.org/job-name": name, "training.kubeflow.org/job-role": "launcher",
                          "batch.kubernetes.io/job-name": launcher, "job-name": launcher,
                          "batch.kubernetes.io/controller-uid": launcher_uid, "controller-uid": launcher_uid}
            owner = {"apiVersion": "batch/v1", "kind": "Job", "name": launcher, "uid": launcher_uid}
        pod_labels = dict(template.get("metadata", {}).get("labels", {}), **pod_labels)
        container = template["spec"]["containers"][0]
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                      "startedAt": stamp, "finishedAt": stamp, "containerID": "containerd://" + uuid.uuid4().hex}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": pod_name, "namespace": namespace, "labels": pod_labels, "uid": str(uuid.uuid4()),
                            "creationTimestamp": stamp, "resourceVersion": store.resource_version(),
                            "ownerReferences": [dict(owner, controller=True, blockOwnerDeletion=True)]},
               "spec": dict(template["spec"], nodeName=node or "node-of-the-launcher"),
               "status": {"phase": "Succeeded" if code == 0 else "Failed", "startTime": stamp,
                          "containerStatuses": [{"name": container["name"], "image": container["image"],
                                                 "imageID": "", "ready": False, "restartCount": 0, "started": False,
                                                 "containerID": terminated["containerID"],
                                                 "state": {"terminated": terminated}}]},
               "_log": log}
        store.objects[("", "pods", namespace, pod_name)] = {"object": pod, "owners": {}, "ops": {}}
        if plural == "mpijobs":
            conditions = [{"type": "Created", "status": "True", "reason": "MPIJobCreated",
                           "message": f"MPIJob {namespace}/{name} is created."},
                          {"type": "Running", "status": "False", "reason": "MPIJobRunning" if code == 0 else "MPIJobFailed",
                           "message": f"MPIJob {namespace}/{name} is running."}]
            if code == 0:
                conditions.append({"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded",
                                   "message": f"MPIJob {namespace}/{name} successfully completed."})
            else:  # updateMPIJobFailedStatus: the launcher Job's reason and the last failed pod's
                conditions.append({"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded/Error",
                                   "message": "Job has reached the specified backoff limit: "})
            for condition in conditions:
                condition.update({"lastUpdateTime": stamp, "lastTransitionTime": stamp})
            job["status"] = {"conditions": conditions, "startTime": stamp,
                             "replicaStatuses": {"Launcher": {"succeeded": 1} if code == 0 else {"failed": 1},
                                                 "Worker": {}}}
            if code == 0:
                job["status"]["completionTime"] = stamp
        else:
            if code == 0:
                conditions = [{"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                               "message": "Reached expected number of succeeded pods"},
                              {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                               "message": "Reached expected number of succeeded pods"}]
                counts = {"succeeded": 1}
            else:
                conditions = [{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                               "message": "Job has reached the specified backoff limit"},
                              {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                               "message": "Job has reached the specified backoff limit"}]
                counts = {"failed": 1}
            for condition in conditions:
                condition.update({"lastProbeTime": stamp, "lastTransitionTime": stamp})
            job["status"] = dict(counts, conditions=conditions, startTime=stamp, ready=0, terminating=0,
                                 uncountedTerminatedPods={}, **({"completionTime": stamp} if code == 0 else {}))
        job["metadata"]["resourceVersion"] = store.resource_version()


def pod_log(server, path, query):
    """GET .../pods/NAME/log: the recorded output of the pod's container."""
    parts = [part for part in path.split("/") if part]
    if len(parts) != 7 or parts[:3] != ["api", "v1", "namespaces"] or parts[4] != "pods":
        return status(404, "NotFound", "the server could not find the requested resource")
    namespace, name = parts[3], parts[5]
    entry = server.store.objects.get(("", "pods", namespace, name))
    if entry is None:
        return status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
    containers = [c["name"] for c in entry["object"]["spec"]["containers"]]
    container = query.get("container", containers[0] if len(containers) == 1 else "")
    if container not in containers:  # pkg/registry/core/pod/strategy.go LogLocation
        return status(400, "BadRequest", f"container {container} is not valid for pod {name}")
    return 200, entry["object"]["_log"]


def strip(obj):
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("resourceVersion", None)
    return obj


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--crds", action="append", default=[])
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--client-ca")
    parser.add_argument("--token", action="append", default=[])
    parser.add_argument("--seed")
    parser.add_argument("--log", default="requests.jsonl")
    parser.add_argument("--forbid", action="append", default=[])
    parser.add_argument("--k8s-version", default="1.33")
    parser.add_argument("--job-log", action="append", default=[])
    parser.add_argument("--job-hang", action="append", default=[])
    parser.add_argument("--job-seconds", type=float, default=0.5)
    args = parser.parse_args()
    server = Server(("127.0.0.1", args.port), Handler)
    server.store = Store(args.crds, args.k8s_version)
    server.tokens = set(args.token)
    server.log = args.log
    server.forbid = set(args.forbid)
    server.job_logs = {}
    for mapping in args.job_log:
        target, recorded = mapping.split("=", 1)
        path, code = recorded.rsplit(":", 1)
        server.job_logs[target] = (path, int(code))
    server.job_hang = set(args.job_hang)
    server.job_seconds = args.job_seconds
    if args.seed:  # objects other managers made before toolkit
        with open(args.seed) as handle:
            for seeded in json.load(handle):
                obj = seeded["object"]
                parsed = parse_path(seeded["path"])
                key = (parsed[0], parsed[3], parsed[2], parsed[4])
                entry = server.store.objects.setdefault(key, {"object": {}, "owners": {}, "ops": {}})
                for p, value in leaves(obj):
                    if p:
                        set_path(entry["object"], p, value)
                    if p and p not in IDENTITY:
                        entry["owners"].setdefault(p, set()).add(seeded["manager"])
                entry["object"]["metadata"].setdefault("uid", str(uuid.uuid4()))
                entry["object"]["metadata"].setdefault("creationTimestamp", now())
                entry["object"]["metadata"]["resourceVersion"] = server.store.resource_version()
                entry["ops"][seeded["manager"]] = (seeded.get("operation", "Update"), obj["apiVersion"], now())
    if args.cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        if args.client_ca:
            context.load_verify_locations(args.client_ca)
            context.verify_mode = ssl.CERT_OPTIONAL
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"listening on {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
