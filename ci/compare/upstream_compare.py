"""Side by side with the upstream operator: the library behind `ci/upstream-compare`.

Two halves, kept apart so the comparison is testable without a cluster:

- `run_side` runs one controller (the upstream manager, or `nodewright run`) on a fresh
  `nodewright sim serve` and records what happened *through the API*: a watch of nodes, pods,
  Jobs and the CRs, stamped with the server's virtual clock (the kubeconfig's
  `nodewright.nvidia.com/sim-clock` extension), the server's `apiserver_request_total`, and
  the controller's CPU time and peak RSS from /proc. It returns a facts document (JSON).
- `compare` and `render` turn two facts documents into the Markdown report: a side-by-side
  table and the divergences, each matched to a `(compare: KEY)` entry of
  docs/compatibility.md or flagged unexplained.

The comparison needs only the standard library; recording also needs PyYAML.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

PREFIXES = ("nodewright.nvidia.com/", "skyhook.nvidia.com/")
RECORDER_AGENT = "nodewright-compare/1"
# Clients whose requests are the harness's, not the controller's.
HARNESS_CLIENTS = {"nodewright-compare", "kubectl"}
USAGE = (
    "usage: ci/upstream-compare --manager PATH --fleet FILE --repo DIR [--rev REV] "
    "[--then REV] [--speed N]\n"
    "       ci/upstream-compare --facts UPSTREAM.json OURS.json"
)


class UsageError(Exception):
    """A command line or input the harness cannot run with (exit 2)."""


class RunError(Exception):
    """A side that could not be run to the end (exit 2: no comparison was possible)."""


# --- names ---------------------------------------------------------------------------------


def strip_prefix(key: str) -> str:
    """`skyhook.nvidia.com/nodeState_x` and `nodewright.nvidia.com/nodeState_x` → `nodeState_x`."""
    for prefix in PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def prefixed(mapping: dict | None) -> dict:
    """The entries of `mapping` whose keys carry either project prefix, keys normalised."""
    return {strip_prefix(k): v for k, v in (mapping or {}).items() if k.startswith(PREFIXES)}


# --- reverse legacy conversion -------------------------------------------------------------


def to_legacy(obj: dict) -> dict:
    """The reverse of schema/src/legacy.rs: a `nodewright.nvidia.com` NodeWright or
    DeploymentPolicy as upstream's `skyhook.nvidia.com` Skyhook or DeploymentPolicy."""
    if obj.get("apiVersion") != "nodewright.nvidia.com/v1alpha1":
        return obj
    kind = {"NodeWright": "Skyhook", "DeploymentPolicy": "DeploymentPolicy"}.get(obj.get("kind"))
    if kind is None:
        return obj
    out = json.loads(json.dumps(obj))
    out["apiVersion"] = "skyhook.nvidia.com/v1alpha1"
    out["kind"] = kind
    meta = out.get("metadata") or {}
    for section in ("annotations", "labels"):
        values = meta.get(section)
        if values:
            meta[section] = {
                ("skyhook.nvidia.com/" + k[len("nodewright.nvidia.com/"):])
                if k.startswith("nodewright.nvidia.com/") else k: v
                for k, v in values.items()
            }
    if meta.get("finalizers"):
        meta["finalizers"] = [
            "skyhook.nvidia.com/skyhook" if f == "nodewright.nvidia.com/nodewright" else f
            for f in meta["finalizers"]
        ]
    return out


def webhook_defaults(obj: dict) -> dict:
    """What upstream's mutating webhook does to a DeploymentPolicy (deployment_policy_types.go
    `Default`): the harness runs the manager without webhooks, and the manager dereferences
    these fields."""
    if obj.get("kind") != "DeploymentPolicy":
        return obj
    spec = obj.get("spec") or {}
    for holder in [spec.get("default") or {}, *(spec.get("compartments") or [])]:
        strategy = holder.get("strategy") or {}
        for name, extra in (("fixed", {}), ("linear", {"delta": 1}), ("exponential", {"growthFactor": 2})):
            if isinstance(strategy.get(name), dict):
                for k, v in {"initialBatch": 1, "batchThreshold": 100, "safetyLimit": 50, **extra}.items():
                    strategy[name].setdefault(k, v)
    return obj


# --- selectors and compartments ------------------------------------------------------------


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist)."""
    selector = selector or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def compartment_of(policy: dict | None, labels: dict) -> str:
    """The compartment a node belongs to under `policy` (first matching selector), else
    `__default__`, upstream's name for the policy's default."""
    if policy:
        for c in (policy.get("spec") or {}).get("compartments") or []:
            if selector_matches(c.get("selector"), labels):
                return c.get("name", "?")
    return "__default__"


# --- the virtual clock ---------------------------------------------------------------------


def parse_time(text) -> datetime:
    if isinstance(text, datetime):  # YAML reads an RFC 3339 scalar as a timestamp
        return text if text.tzinfo else text.replace(tzinfo=timezone.utc)
    text = text.strip().replace("Z", "+00:00")
    # Python < 3.11 accepts at most 6 fractional digits.
    m = re.match(r"^(.*\.\d{6})\d*(.*)$", text)
    if m:
        text = m.group(1) + m.group(2)
    return datetime.fromisoformat(text)


@dataclass
class VirtualClock:
    """`virtual_origin + (wall now - wall_origin) × speed`, as sim serve advances its world."""

    wall_origin: datetime
    virtual_origin: datetime
    speed: float

    @staticmethod
    def from_kubeconfig(doc: dict) -> "VirtualClock":
        for cluster in doc.get("clusters") or []:
            for ext in (cluster.get("cluster") or {}).get("extensions") or []:
                if ext.get("name") == "nodewright.nvidia.com/sim-clock":
                    e = ext["extension"]
                    return VirtualClock(
                        parse_time(e["wallOrigin"]), parse_time(e["virtualOrigin"]), float(e["speed"])
                    )
        raise RunError("the kubeconfig declares no sim-clock extension")

    def now(self) -> datetime:
        return self.virtual_origin + (datetime.now(timezone.utc) - self.wall_origin) * self.speed


# --- recording -----------------------------------------------------------------------------


# A package's stages in the order a rollout takes them (§8.14 rule 2).
STAGE_ORDER = {"uninstall": 0, "uninstall-interrupt": 0, "apply": 1, "upgrade": 1, "config": 2,
               "interrupt": 3, "post-interrupt": 4}


def undone_entries(was: dict, now: dict) -> list[tuple[str, str]]:
    """The node-state entries a node write took back from `complete` to an unfinished state
    of the same stage or an earlier one: a finished stage undone, as a write from a stale copy
    of the annotation does. A return to `config` is left out: a configuration change takes a
    node back there on purpose (§16.3). `was` and `now` are a node's annotations (keys
    normalised); each result is (the `nodeState_<name>` key, the entry's `name|version`)."""
    out = []
    for key in sorted(k for k in was if k.startswith("nodeState_") and k in now):
        try:
            before, after = json.loads(was[key]), json.loads(now[key])
        except ValueError:
            continue
        if not isinstance(before, dict) or not isinstance(after, dict):
            continue
        for entry, old in sorted(before.items()):
            new = after.get(entry)
            if not isinstance(old, dict) or not isinstance(new, dict) or old.get("state") != "complete":
                continue
            back = STAGE_ORDER.get(new.get("stage"), 99) <= STAGE_ORDER.get(old.get("stage"), -1)
            if new.get("state") != "complete" and new.get("stage") != "config" and back:
                out.append((key, entry))
    return out


def pod_finished(pod: dict) -> bool:
    """Whether a stage pod's work is over: the pod ended, or (upstream's pods, whose main
    container only idles) every init container terminated, or one failed."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    inits = [(s.get("state") or {}).get("terminated") for s in status.get("initContainerStatuses") or []]
    return bool(inits) and (all(inits) or any(t and t.get("exitCode") for t in inits))


class Recorder:
    """Watches nodes, pods, Jobs and the CRs of one sim serve and keeps the timeline.

    Every observation is stamped with the server's virtual clock when it arrives."""

    def __init__(self, server: str, clock: VirtualClock, cr_plural: str, cr_group: str, namespace: str):
        self.server = server
        self.clock = clock
        self.namespace = namespace
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.events: list[dict] = []  # {t, kind, node, detail}
        self.nodes: dict[str, dict] = {}
        self.crs: dict[str, dict] = {}
        self.seen_exec: dict[str, str] = {}  # uid → `package/stage` of each stage execution
        self.seen_stopped: set[str] = set()
        self.seen_evict: set[str] = set()
        self.phase = 1
        self.rv = 0
        self.errors: list[str] = []
        self.paths = {
            "nodes": "/api/v1/nodes",
            "pods": "/api/v1/pods",
            "jobs": "/apis/batch/v1/jobs",
            "crs": f"/apis/{cr_group}/v1alpha1/{cr_plural}",
        }
        self.threads = [threading.Thread(target=self._watch, args=(k, p), daemon=True)
                        for k, p in self.paths.items()]

    def start(self):
        for t in self.threads:
            t.start()

    def t(self) -> float:
        return self.clock.now().timestamp()

    def _get(self, path: str, stream: bool = False, timeout: float = 60):
        req = urllib.request.Request(self.server + path, headers={"User-Agent": RECORDER_AGENT})
        return urllib.request.urlopen(req, timeout=timeout)

    def _watch(self, kind: str, path: str):
        while not self.stop.is_set():
            try:
                with self._get(path) as r:
                    listing = json.load(r)
                rv = listing["metadata"]["resourceVersion"]
                for item in listing.get("items") or []:
                    self._observe(kind, "ADDED", item)
                with self._get(f"{path}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true",
                               timeout=3600) as stream:
                    for line in stream:
                        if self.stop.is_set():
                            return
                        ev = json.loads(line)
                        if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self._observe(kind, ev["type"], ev["object"])
            except Exception as e:  # a dropped watch is listed and watched again
                if not self.stop.is_set():
                    self.errors.append(f"{kind}: {e}")
                    time.sleep(0.2)

    def _event(self, kind: str, node: str, detail: str = "", **extra):
        # The server's resourceVersion orders events exactly, across watches; `t` is when the
        # recorder saw them.
        self.events.append({"t": self.t(), "rv": self.rv, "phase": self.phase, "kind": kind,
                            "node": node, "detail": detail, **extra})

    def _observe(self, kind: str, typ: str, obj: dict):
        with self.lock:
            try:
                self.rv = int(obj["metadata"].get("resourceVersion") or 0)
            except ValueError:
                self.rv = 0
            getattr(self, "_on_" + kind)(typ, obj)

    def _on_nodes(self, typ: str, node: dict):
        name = node["metadata"]["name"]
        old = self.nodes.get(name)
        if typ == "DELETED":
            self.nodes.pop(name, None)
            return
        self.nodes[name] = node
        if old is None:
            return
        was = bool((old.get("spec") or {}).get("unschedulable"))
        now = bool((node.get("spec") or {}).get("unschedulable"))
        if was != now:
            self._event("cordon" if now else "uncordon", name)
        boot = lambda n: ((n.get("status") or {}).get("nodeInfo") or {}).get("bootID")
        if boot(old) != boot(node):
            self._event("reboot", name)
        for key, entry in undone_entries(prefixed(old["metadata"].get("annotations")),
                                         prefixed(node["metadata"].get("annotations"))):
            self._event("undone", name, f"{entry} {key[len('nodeState_'):]}")
        was_labels = prefixed(old["metadata"].get("labels"))
        for key, value in prefixed(node["metadata"].get("labels")).items():
            if key.startswith("status_") and value in ("complete", "erroring") and was_labels.get(key) != value:
                self._event(value, name, cr=key[len("status_"):])

    def _on_pods(self, typ: str, pod: dict):
        meta = pod["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        node = (pod.get("spec") or {}).get("nodeName") or ""
        conditions = (pod.get("status") or {}).get("conditions") or []
        if key not in self.seen_evict and any(
            c.get("type") == "DisruptionTarget" and c.get("reason") == "EvictionByEvictionAPI"
            for c in conditions
        ):
            self.seen_evict.add(key)
            # A replacement pod's name ends in a random suffix, different in each run.
            shown = re.sub(r"-[a-z0-9]{5}$", "-*", key)
            self._event("evict", node, shown)
        owners = meta.get("ownerReferences") or []
        if not any(o.get("kind") == "Job" for o in owners):
            self._execution("Pod", pod, node)
            self._stopped(typ, pod, node, finished=pod_finished(pod))

    def _on_jobs(self, typ: str, job: dict):
        spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
        node = spec.get("nodeName") or ""
        if not node:
            for term in (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                         .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
                             "nodeSelectorTerms") or []:
                for f in term.get("matchFields") or []:
                    if f.get("key") == "metadata.name" and f.get("values"):
                        node = f["values"][0]
        node = node or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname", "")
        self._execution("Job", job, node)
        finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                       for c in (job.get("status") or {}).get("conditions") or [])
        self._stopped(typ, job, node, finished)

    def _execution(self, what: str, obj: dict, node: str):
        meta = obj["metadata"]
        uid = meta.get("uid") or meta["name"]
        annotations = prefixed(meta.get("annotations"))
        if uid in self.seen_exec or "package" not in annotations:
            return
        try:
            package = json.loads(annotations["package"])
        except ValueError:
            return
        cr = package.get("skyhook") or package.get("nodewright") or ""
        stage = package.get("stage", "?")
        self.seen_exec[uid] = f"{package.get('name')}/{stage}"
        self._event("exec", node, self.seen_exec[uid], workload=what, cr=cr,
                    version=package.get("version"))

    def _stopped(self, typ: str, obj: dict, node: str, finished: bool):
        """A stage execution deleted before it finished (its pod or Job deleted while it ran),
        which the controller then runs again or gives up."""
        meta = obj["metadata"]
        uid = meta.get("uid") or meta["name"]
        deleting = typ == "DELETED" or meta.get("deletionTimestamp")
        if not deleting or finished or uid not in self.seen_exec or uid in self.seen_stopped:
            return
        self.seen_stopped.add(uid)
        self._event("stopped", node, self.seen_exec[uid])

    def _on_crs(self, typ: str, cr: dict):
        name = cr["metadata"]["name"]
        if typ == "DELETED":
            self.crs.pop(name, None)
        else:
            self.crs[name] = cr

    def snapshot(self):
        with self.lock:
            return json.loads(json.dumps({"nodes": self.nodes, "crs": self.crs}))


def converged(crs: dict, expected: dict[str, int]) -> bool:
    """Every expected CR exists at or past its minimum generation, has observed it, and is
    complete."""
    for name, min_generation in expected.items():
        cr = crs.get(name)
        if cr is None:
            return False
        generation = cr["metadata"].get("generation", 0)
        status = cr.get("status") or {}
        if generation < min_generation or status.get("observedGeneration", 0) < generation:
            return False
        if status.get("status") != "complete":
            return False
    return True


# --- one side ------------------------------------------------------------------------------


def proc_usage(pid: int) -> dict:
    """CPU seconds (utime + stime) and peak RSS (VmHWM, MiB) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    hwm = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
    return {"cpu_seconds": round(cpu, 2), "peak_rss_mib": round(hwm, 1)}


def scrape_requests(server: str) -> dict[str, int]:
    """The controller's requests by verb: `apiserver_request_total` without the harness's."""
    req = urllib.request.Request(server + "/metrics", headers={"User-Agent": RECORDER_AGENT})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
    except urllib.error.HTTPError as e:
        if e.code == 404:  # a sim serve older than its /metrics: no counts to report
            return {}
        raise
    by_verb: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^apiserver_request_total\{(.*)\} (\d+)$", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))
        if labels.get("client") in HARNESS_CLIENTS:
            continue
        verb = labels.get("verb", "?")
        if labels.get("subresource"):
            verb += "/" + labels["subresource"]
        by_verb[verb] = by_verb.get(verb, 0) + int(m.group(2))
    return dict(sorted(by_verb.items()))


@dataclass
class Side:
    name: str  # "upstream" or "ours"
    nodewright: str
    kubectl: str
    fleet: Path
    speed: float
    timeout: float
    work: Path
    manager: str | None = None
    crds: Path | None = None
    procs: list = field(default_factory=list)


def manifests_at(repo: Path, rev: str, yaml) -> list[dict]:
    """The NodeWright and DeploymentPolicy objects of `repo` at `rev`, in file order."""
    files = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", rev],
                           check=True, capture_output=True, text=True).stdout.split()
    objects = []
    for f in sorted(files):
        if not f.endswith((".yaml", ".yml")):
            continue
        text = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{f}"], check=True,
                              capture_output=True, text=True).stdout
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") in ("NodeWright", "Skyhook", "DeploymentPolicy"):
                objects.append(doc)
    return objects


def wait_for(predicate, timeout: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every)
    raise RunError(f"timed out after {timeout:.0f}s waiting for {what}")


def run_side(side: Side, repo: Path, revs: list[str], yaml) -> dict:
    """Runs one controller over `revs` (the rollout, then the change) and returns its facts."""
    upstream = side.name == "upstream"
    namespace = "skyhook" if upstream else "nodewright"
    kubeconfig = side.work / "kubeconfig"
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    serve = subprocess.Popen(
        [side.nodewright, "sim", "serve", "--scenario", str(side.fleet), "--speed", str(side.speed),
         "--namespace", namespace, "--kubeconfig", str(kubeconfig)],
        stdout=open(side.work / "serve.log", "w"), stderr=subprocess.STDOUT)
    side.procs.append(serve)
    wait_for(lambda: kubeconfig.exists() and kubeconfig.stat().st_size > 0, 30, "sim serve")
    doc = yaml.safe_load(kubeconfig.read_text())
    server = doc["clusters"][0]["cluster"]["server"]
    clock = VirtualClock.from_kubeconfig(doc)
    group = "skyhook.nvidia.com" if upstream else "nodewright.nvidia.com"
    plural = "skyhooks" if upstream else "nodewrights"

    def kubectl(*args, stdin: str | None = None):
        r = subprocess.run([side.kubectl, *args], input=stdin, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RunError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    wait_for(lambda: subprocess.run([side.kubectl, "get", "--raw", "/readyz"], env=env,
                                    capture_output=True).returncode == 0, 30, "sim serve /readyz")
    revisions = [manifests_at(repo, rev, yaml) for rev in revs]
    policy_of = lambda objs: {o["metadata"]["name"]: o for o in objs if o.get("kind") == "DeploymentPolicy"}
    if upstream:
        kubectl("apply", "-f", str(side.crds))
        kubectl("wait", "--for", "condition=established", "--timeout=30s",
                "crd/skyhooks.skyhook.nvidia.com", "crd/deploymentpolicies.skyhook.nvidia.com")
    else:
        # Our CRDs, as an operator installs them before the reconciler starts.
        crds = subprocess.run([side.nodewright, "crds"], capture_output=True, text=True, check=True).stdout
        kubectl("apply", "-f", "-", stdin=crds)
    recorder = Recorder(server, clock, plural, group, namespace)
    recorder.start()
    wait_for(lambda: bool(recorder.nodes), 30, "the recorder's first node list")
    facts: dict = {"controller": side.name, "speed": side.speed, "phases": []}

    git_work = side.work / "repo"
    if upstream:
        apply_upstream(kubectl, revisions[0], yaml)
    else:
        subprocess.run(["git", "clone", "-q", str(repo), str(git_work)], check=True)
        subprocess.run(["git", "-C", str(git_work), "checkout", "-q", "-B", "main", revs[0]], check=True)
    start = clock.now()
    log = open(side.work / "controller.log", "w")
    if upstream:
        free = lambda: _free_port()
        controller = subprocess.Popen(
            [side.manager], stdout=log, stderr=subprocess.STDOUT,
            env=dict(env, ENABLE_WEBHOOKS="false", LOG_ENCODER="console", LOG_LEVEL="info",
                     METRICS_PORT=f"127.0.0.1:{free()}", PROBE_PORT=f"127.0.0.1:{free()}",
                     NAMESPACE=namespace))
    else:
        controller = subprocess.Popen(
            [side.nodewright, "run", "--repo", str(git_work), "--kubeconfig", str(kubeconfig),
             "--namespace", namespace, "--no-status", "--no-progress", "--poll-interval", "1s",
             *os.environ.get("NODEWRIGHT_RUN_FLAGS", "").split()],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    side.procs.append(controller)
    previous: dict[str, int] = {}
    try:
        for index, objects in enumerate(revisions):
            recorder.phase = index + 1
            if index > 0:
                start = clock.now()
                if upstream:
                    apply_upstream(kubectl, objects, yaml, previous=revisions[index - 1])
                else:
                    subprocess.run(["git", "-C", str(git_work), "checkout", "-q", revs[index], "--", "."],
                                   check=True)
                    subprocess.run(["git", "-C", str(git_work), "read-tree", "-u", "--reset", revs[index]],
                                   check=True)
                    subprocess.run(["git", "-C", str(git_work), "-c", "user.name=compare", "-c",
                                    "user.email=compare@localhost", "commit", "-q", "--allow-empty",
                                    "-m", f"then {revs[index]}"], check=True)
            old = revisions[index - 1] if index > 0 else []
            changed = {o["metadata"]["name"] for o in objects
                       if o.get("kind") in ("NodeWright", "Skyhook") and o not in old}
            expected = {o["metadata"]["name"]: previous.get(o["metadata"]["name"], 0) + (1 if o["metadata"]["name"] in changed else 0)
                        for o in objects if o.get("kind") in ("NodeWright", "Skyhook")}

            def done():
                if controller.poll() is not None:
                    raise RunError(f"the {side.name} controller exited with {controller.returncode}; "
                                   f"see {side.work / 'controller.log'}")
                return converged(recorder.snapshot()["crs"], expected)

            wait_for(done, side.timeout, f"the {side.name} controller to converge (phase {index + 1})", 0.1)
            end = clock.now()
            state = recorder.snapshot()
            previous = {n: c["metadata"].get("generation", 0) for n, c in state["crs"].items()}
            policies = policy_of(objects)
            facts["phases"].append(phase_facts(recorder, state, objects, policies, index + 1, start.timestamp(),
                                               (end - start).total_seconds(), proc_usage(controller.pid)))
        facts["requests"] = scrape_requests(server)
        facts["usage"] = proc_usage(controller.pid)
        facts["recorder_errors"] = recorder.errors[:20]
        return facts
    finally:
        recorder.stop.set()
        # What was seen, for reading after a failed or surprising run.
        (side.work / "recorded.json").write_text(json.dumps(
            {"events": recorder.events, **recorder.snapshot()}, indent=1, default=str))
        stop_all(side)


def _free_port() -> int:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def apply_upstream(kubectl, objects: list[dict], yaml, previous: list[dict] | None = None):
    """Applies `objects` converted to upstream's group; deletes those the new revision dropped."""
    docs = [webhook_defaults(to_legacy(o)) for o in objects]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs, sort_keys=False))
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for o in previous or []:
        if (o["kind"], o["metadata"]["name"]) not in names:
            kind = "skyhook" if o["kind"] in ("NodeWright", "Skyhook") else "deploymentpolicies.skyhook.nvidia.com"
            kubectl("delete", kind, o["metadata"]["name"])


def stop_all(side: Side):
    for p in reversed(side.procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    side.procs.clear()


def phase_facts(recorder: Recorder, state: dict, objects: list[dict], policies: dict, phase: int,
                start: float, converge_seconds: float, usage: dict) -> dict:
    """What one phase left on the cluster and what happened during it."""
    nodes = state["nodes"]
    policy_for = {}
    for o in objects:
        if o.get("kind") in ("NodeWright", "Skyhook"):
            policy_for[o["metadata"]["name"]] = policies.get((o.get("spec") or {}).get("deploymentPolicy"))
    final = {}
    for name, node in sorted(nodes.items()):
        meta = node["metadata"]
        annotations = prefixed(meta.get("annotations"))
        states = {}
        for key, value in annotations.items():
            if key.startswith("nodeState_"):
                try:
                    parsed = json.loads(value)
                except ValueError:
                    parsed = {"<unparsable>": value}
                states[key[len("nodeState_"):]] = {
                    k: f"{v.get('stage')}/{v.get('state')}" for k, v in sorted(parsed.items())}
        final[name] = {
            "packages": states,
            "annotations": sorted(k for k in annotations if not k.startswith("nodeState_")),
            "labels": {k: v for k, v in sorted(prefixed(meta.get("labels")).items())},
            "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        }
    events = sorted((dict(e) for e in recorder.events if e["phase"] == phase),
                    key=lambda e: (e["rv"], e["t"]))
    for e in events:
        e["t"] = round(e["t"] - start, 1)
    # Interrupted = cordoned; counted per compartment of every CR's policy.
    interrupted: dict[str, int] = {}
    for cr, policy in policy_for.items():
        comp = {n: compartment_of(policy, node["metadata"].get("labels") or {}) for n, node in nodes.items()}
        current: dict[str, set] = {}
        for e in events:
            if e["kind"] not in ("cordon", "uncordon") or e["node"] not in comp:
                continue
            c = f"{cr}/{comp[e['node']]}"
            s = current.setdefault(c, set())
            (s.add if e["kind"] == "cordon" else s.discard)(e["node"])
            interrupted[c] = max(interrupted.get(c, 0), len(s))
        for n in comp.values():
            interrupted.setdefault(f"{cr}/{n}", 0)
    batches = batch_membership(events, {cr: {n: compartment_of(policy, node["metadata"].get("labels") or {})
                                             for n, node in nodes.items()}
                                        for cr, policy in policy_for.items()})
    return {
        "phase": phase,
        "converge_seconds": round(converge_seconds, 1),
        "usage_at_end": usage,
        "final": final,
        "events": events,
        "max_interrupted": dict(sorted(interrupted.items())),
        "policies": {cr: (p or {}).get("metadata", {}).get("name") for cr, p in sorted(policy_for.items())},
        "batches": dict(sorted(batches.items())),
    }


# --- comparison ----------------------------------------------------------------------------


def batch_membership(events: list[dict], compartments: dict[str, dict[str, str]]) -> dict:
    """Batches as the API shows them, per NodeWright and compartment: nodes in the order of
    their first stage execution; a node that starts while a node of the open batch is not yet
    complete joins it, one that starts after all of them completed opens the next batch."""
    out: dict[str, dict[str, list]] = {}
    open_batch: dict[str, tuple[int, set, set]] = {}  # key → (number, members, completed)
    started: set = set()
    for e in events:
        cr = e.get("cr")
        if cr not in compartments or e["node"] not in compartments[cr]:
            continue
        key = f"{cr}/{compartments[cr][e['node']]}"
        number, members, completed = open_batch.get(key, (0, set(), set()))
        if e["kind"] == "complete":
            completed.add(e["node"])
        elif e["kind"] == "exec" and (cr, e["node"]) not in started:
            started.add((cr, e["node"]))
            if not members or members <= completed:
                number, members, completed = number + 1, set(), set()
            members.add(e["node"])
            out.setdefault(key, {}).setdefault(str(number), []).append(e["node"])
        open_batch[key] = (number, members, completed)
    return {k: {n: sorted(v) for n, v in b.items()} for k, b in sorted(out.items())}


@dataclass
class Divergence:
    key: str  # what kind of difference; matched to `(compare: KEY)` in docs/compatibility.md
    subject: str
    upstream: str
    ours: str
    explained_by: str | None = None


def _seq(events: list[dict], node: str, kinds: tuple) -> list[str]:
    out = []
    for e in events:
        if e["node"] != node or e["kind"] not in kinds:
            continue
        out.append(e["kind"] if e["kind"] != "exec" else e["detail"])
    return out


def sequence_key(up: list[str], ours: list[str]) -> str:
    """The divergence key of a node's two different sequences of cordons, reboots and stages:
    `sequence:cordon-order` when only where the cordon falls differs, `sequence:repeated-attempt`
    when one side ran a stage again right away (where the cordon falls aside: upstream cordons
    after a stage started, this project before), else `sequence`."""
    def without_cordon(seq):
        return [x for x in seq if x != "cordon"]

    def collapsed(seq):
        return [x for i, x in enumerate(seq) if i == 0 or seq[i - 1] != x]

    if without_cordon(up) == without_cordon(ours) and up.count("cordon") == ours.count("cordon"):
        return "sequence:cordon-order"
    if collapsed(without_cordon(up)) == collapsed(without_cordon(ours)):
        return "sequence:repeated-attempt"
    return "sequence"


def compare(up: dict, ours: dict) -> list[Divergence]:
    """The divergences between two facts documents, most specific key first."""
    out: list[Divergence] = []
    if len(up["phases"]) != len(ours["phases"]):
        out.append(Divergence("phases", "run", str(len(up["phases"])), str(len(ours["phases"]))))
    for pu, po in zip(up["phases"], ours["phases"]):
        p = f"phase {pu['phase']}"
        nodes = sorted(set(pu["final"]) | set(po["final"]))
        for n in nodes:
            fu, fo = pu["final"].get(n, {}), po["final"].get(n, {})
            if fu.get("packages") != fo.get("packages"):
                out.append(Divergence("final-state", f"{p} {n}", json.dumps(fu.get("packages")),
                                      json.dumps(fo.get("packages"))))
            au, ao = set(fu.get("annotations", [])), set(fo.get("annotations", []))
            for a in sorted(au ^ ao):
                family = re.sub(r"_.*$", "_", a)
                out.append(Divergence(f"annotation:{family}", f"{p} {n} {a}",
                                      "present" if a in au else "absent",
                                      "present" if a in ao else "absent"))
            if fu.get("labels") != fo.get("labels"):
                out.append(Divergence("labels", f"{p} {n}", json.dumps(fu.get("labels")),
                                      json.dumps(fo.get("labels"))))
            if fu.get("unschedulable") != fo.get("unschedulable"):
                out.append(Divergence("cordoned-at-end", f"{p} {n}", str(fu.get("unschedulable")),
                                      str(fo.get("unschedulable"))))
            su = _seq(pu["events"], n, ("cordon", "uncordon", "reboot", "exec"))
            so = _seq(po["events"], n, ("cordon", "uncordon", "reboot", "exec"))
            if su != so:
                out.append(Divergence(sequence_key(su, so), f"{p} {n}", " → ".join(su) or "(nothing)",
                                      " → ".join(so) or "(nothing)"))
            # Pods of the starting cluster, by name; replacement pods (a ReplicaSet's, named
            # `base-*`) land where the scheduler found room, which depends on the node order.
            for replacement in (False, True):
                eu = sorted(e["detail"] for e in pu["events"] if e["kind"] == "evict" and e["node"] == n
                            and e["detail"].endswith("-*") == replacement)
                eo = sorted(e["detail"] for e in po["events"] if e["kind"] == "evict" and e["node"] == n
                            and e["detail"].endswith("-*") == replacement)
                if eu != eo:
                    out.append(Divergence("evictions:replacement" if replacement else "evictions", f"{p} {n}",
                                          ", ".join(eu) or "(none)", ", ".join(eo) or "(none)"))
        nu = sorted(e["node"] for e in pu["events"] if e["kind"] == "erroring")
        no = sorted(e["node"] for e in po["events"] if e["kind"] == "erroring")
        if nu != no:
            out.append(Divergence("erroring", p, ", ".join(nu) or "(none)", ", ".join(no) or "(none)"))
        wu = sorted({e.get("workload") for e in pu["events"] if e["kind"] == "exec"})
        wo = sorted({e.get("workload") for e in po["events"] if e["kind"] == "exec"})
        if wu != wo:
            out.append(Divergence("execution-kind", p, ", ".join(wu) or "(none)", ", ".join(wo) or "(none)"))
        for c in sorted(set(pu["max_interrupted"]) | set(po["max_interrupted"])):
            a, b = pu["max_interrupted"].get(c), po["max_interrupted"].get(c)
            if a != b:
                # After the first phase, a change to a converged fleet (upgrade, config, uninstall).
                key = "max-interrupted:change" if pu["phase"] > 1 else "max-interrupted"
                out.append(Divergence(key, f"{p} {c}", str(a), str(b)))
        for c in sorted(set(pu["batches"]) | set(po["batches"])):
            a, b = pu["batches"].get(c), po["batches"].get(c)
            if a != b:
                cr, compartment = c.split("/", 1)
                legacy = compartment == "__default__" and not (pu.get("policies") or {}).get(cr)
                members = {n for nodes in (a or {}).values() for n in nodes}
                erroring = any(e["kind"] == "erroring" and e["node"] in members for e in pu["events"] + po["events"])
                key = ("batches:change" if pu["phase"] > 1 else "batches:no-policy" if legacy
                       else "batches:after-erroring" if erroring else "batches")
                out.append(Divergence(key, f"{p} {c}", json.dumps(a), json.dumps(b)))
    return out


def deliberate_entries(compatibility: str) -> dict[str, str]:
    """`(compare: KEY)` tags of docs/compatibility.md's list items → the item's bold title."""
    items: list[str] = []
    for line in compatibility.splitlines():
        if line.startswith("- "):
            items.append(line[2:])
        elif items and line.startswith("  ") and line.strip():
            items[-1] += " " + line.strip()
        else:
            items.append("")
    out = {}
    for item in items:
        title = re.search(r"\*\*(.+?)\*\*", item)
        for tag in re.findall(r"\(compare: ([^)]+)\)", item):
            for key in tag.split(","):
                out[key.strip()] = title.group(1) if title else item.strip()
    return out


def explain(divergences: list[Divergence], entries: dict[str, str]) -> int:
    """Matches each divergence's key to an entry; returns how many stay unexplained."""
    unexplained = 0
    for d in divergences:
        d.explained_by = entries.get(d.key)
        if d.explained_by is None:
            unexplained += 1
    return unexplained


def _ratio(a, b) -> str:
    try:
        return f"{float(b) / float(a):.2f}" if float(a) else "—"
    except (TypeError, ValueError):
        return "—"


def render(up: dict, ours: dict, divergences: list[Divergence], unexplained: int) -> str:
    """The Markdown report; its last line is `unexplained divergences: N`."""
    lines = ["# Side by side: upstream operator and nodewright run", "",
             f"Virtual speed ×{up.get('speed')}. Times are virtual seconds from the start of each phase.", "",
             "| Fact | Upstream | Ours | Ours / upstream |", "|---|---|---|---|"]

    def row(name, a, b, ratio=True):
        lines.append(f"| {name} | {a} | {b} | {_ratio(a, b) if ratio else ''} |")

    for pu, po in zip(up["phases"], ours["phases"]):
        p = f"phase {pu['phase']}"
        row(f"{p}: time to converge (s)", pu["converge_seconds"], po["converge_seconds"])
        for kind in ("cordon", "uncordon", "evict", "reboot", "exec", "stopped", "undone", "erroring"):
            names = dict(exec="stage executions", stopped="stage executions deleted unfinished",
                         undone="finished stages undone by a node write", erroring="nodes turning erroring")
            row(f"{p}: {names.get(kind, kind)}",
                sum(1 for e in pu["events"] if e["kind"] == kind),
                sum(1 for e in po["events"] if e["kind"] == kind))
        for c in sorted(set(pu["max_interrupted"]) | set(po["max_interrupted"])):
            row(f"{p}: max nodes interrupted at once, {c}", pu["max_interrupted"].get(c, "—"),
                po["max_interrupted"].get(c, "—"), ratio=False)
        for c in sorted(set(pu["batches"]) | set(po["batches"])):
            # Members by name for small batches, by count for large ones.
            fmt = lambda b: "; ".join(f"{k}: {' '.join(v) if len(v) <= 8 else f'{len(v)} nodes'}"
                                      for k, v in sorted((b or {}).items(), key=lambda kv: int(kv[0]))) or "—"
            row(f"{p}: batches, {c}", fmt(pu["batches"].get(c)), fmt(po["batches"].get(c)), ratio=False)
    verbs = sorted(set(up.get("requests", {})) | set(ours.get("requests", {})))
    for v in verbs:
        row(f"API requests: {v}", up["requests"].get(v, 0), ours["requests"].get(v, 0))
    row("API requests: total", sum(up.get("requests", {}).values()), sum(ours.get("requests", {}).values()))
    row("controller CPU seconds", up["usage"]["cpu_seconds"], ours["usage"]["cpu_seconds"])
    row("controller peak RSS (MiB)", up["usage"]["peak_rss_mib"], ours["usage"]["peak_rss_mib"])
    lines += ["", "## Timelines", ""]
    for pu, po in zip(up["phases"], ours["phases"]):
        for label, facts in (("upstream", pu), ("ours", po)):
            shown = [f"{e['t']}s {e['kind']} {e['node']} {e['detail']}".rstrip() for e in facts["events"]]
            lines.append(f"<details><summary>phase {pu['phase']}, {label}: {len(shown)} events</summary>")
            lines += ["", "```", *(shown[:400] or ["(none)"]), *(["…"] if len(shown) > 400 else []), "```",
                      "", "</details>", ""]
    lines += ["## Divergences", ""]
    if not divergences:
        lines.append("None.")
    for d in divergences:
        verdict = f"deliberate: {d.explained_by}" if d.explained_by else "**unexplained**"
        lines.append(f"- `{d.key}` {d.subject}: upstream {d.upstream}; ours {d.ours} — {verdict}")
    lines += ["", f"unexplained divergences: {unexplained}"]
    return "\n".join(lines)


def report(up: dict, ours: dict, compatibility: str) -> tuple[str, int]:
    divergences = compare(up, ours)
    unexplained = explain(divergences, deliberate_entries(compatibility))
    return render(up, ours, divergences, unexplained), (1 if unexplained else 0)


# --- command line --------------------------------------------------------------------------


def parse_args(argv: list[str]) -> dict:
    opts: dict = {"speed": "10"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--facts" and i + 2 < len(argv) + 0:
            opts["facts"] = (argv[i + 1], argv[i + 2])
            i += 3
            continue
        if a in ("--manager", "--fleet", "--repo", "--rev", "--then", "--speed", "--keep"):
            if i + 1 >= len(argv):
                raise UsageError(f"{a} needs a value")
            opts[a[2:]] = argv[i + 1]
            i += 2
            continue
        if a in ("-h", "--help"):
            raise UsageError("")
        raise UsageError(f"unknown argument {a!r}")
    if "facts" in opts:
        return opts
    for required in ("manager", "fleet", "repo"):
        if required not in opts:
            raise UsageError(f"--{required} is required")
    try:
        speed = float(opts["speed"])
    except ValueError:
        raise UsageError(f"--speed must be a number, got {opts['speed']!r}") from None
    if not speed > 0:
        raise UsageError(f"--speed must be positive, got {opts['speed']}")
    opts["speed"] = speed
    if not os.access(opts["manager"], os.X_OK):
        raise UsageError(f"--manager {opts['manager']}: not an executable file")
    if not Path(opts["fleet"]).is_file():
        raise UsageError(f"--fleet {opts['fleet']}: no such file")
    return opts


def find_crds(manager: str) -> Path:
    """Upstream's CRDs: $UPSTREAM_CRDS, else config/crd/bases beside or above the manager."""
    if os.environ.get("UPSTREAM_CRDS"):
        return Path(os.environ["UPSTREAM_CRDS"])
    here = Path(manager).resolve().parent
    for base in (here, here.parent, here / "operator", here.parent / "operator"):
        if (base / "config/crd/bases").is_dir():
            return base / "config/crd/bases"
    raise UsageError("cannot find upstream's CRDs (config/crd/bases beside the manager); set UPSTREAM_CRDS")


def prepare_repo(repo: Path, revs: list[str], work: Path) -> tuple[Path, list[str]]:
    """A Git repository and commits for `revs`: `repo` itself when it is one, else a new one
    whose commits hold the subdirectories `revs` names (`.` for `repo` itself)."""
    if subprocess.run(["git", "-C", str(repo), "rev-parse", "--git-dir"], capture_output=True).returncode == 0 \
            and subprocess.run(["git", "-C", str(repo), "rev-parse", "--show-toplevel"], capture_output=True,
                               text=True).stdout.strip() == str(repo.resolve()):
        commits = []
        for rev in revs:
            r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise UsageError(f"{rev}: not a revision of {repo}")
            commits.append(r.stdout.strip())
        return repo, commits
    made = work / "fleet-repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(made)], check=True)
    commits = []
    for rev in revs:
        source = repo / rev
        if not source.is_dir():
            raise UsageError(f"{source}: no such directory (REV names a folder when --repo is not a Git repository)")
        subprocess.run(["git", "-C", str(made), "rm", "-rq", "--ignore-unmatch", "."], check=True)
        for f in sorted(source.rglob("*")):
            if f.is_file():
                target = made / f.relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(f.read_bytes())
        subprocess.run(["git", "-C", str(made), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(made), "-c", "user.name=compare", "-c", "user.email=compare@localhost",
                        "commit", "-q", "--allow-empty", "-m", rev], check=True)
        commits.append(subprocess.run(["git", "-C", str(made), "rev-parse", "HEAD"], check=True,
                                      capture_output=True, text=True).stdout.strip())
    return made, commits


def main(argv: list[str], root: Path) -> int:
    try:
        opts = parse_args(argv)
    except UsageError as e:
        if str(e):
            print(f"error: {e}", file=sys.stderr)
        print(USAGE, file=sys.stderr)
        return 2
    compatibility = (root / "docs/compatibility.md").read_text()
    if "facts" in opts:
        try:
            up, ours = (json.loads(Path(p).read_text()) for p in opts["facts"])
        except (OSError, ValueError) as e:
            print(f"error: cannot read the facts: {e}", file=sys.stderr)
            return 2
        text, code = report(up, ours, compatibility)
        print(text)
        return code
    try:
        import yaml
    except ImportError:
        print("error: recording needs PyYAML (pip install pyyaml)", file=sys.stderr)
        return 2
    work = Path(opts.get("keep") or tempfile.mkdtemp(prefix="upstream-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        crds = find_crds(opts["manager"])
        revs = [opts.get("rev", "HEAD" if (Path(opts["repo"]) / ".git").exists() else ".")]
        if opts.get("then"):
            revs.append(opts["then"])
        repo, commits = prepare_repo(Path(opts["repo"]), revs, work)
    except UsageError as e:
        print(f"error: {e}\n{USAGE}", file=sys.stderr)
        return 2
    nodewright = os.environ.get("NODEWRIGHT", "nodewright")
    kubectl = os.environ.get("KUBECTL", "kubectl")
    timeout = float(os.environ.get("TIMEOUT", "900"))
    facts = {}
    for name in ("upstream", "ours"):
        side_work = work / name
        side_work.mkdir(exist_ok=True)
        side = Side(name, nodewright, kubectl, Path(opts["fleet"]), opts["speed"], timeout, side_work,
                    manager=opts["manager"], crds=crds)
        print(f"running the {name} controller (work files in {side_work})", file=sys.stderr)
        try:
            facts[name] = run_side(side, repo, commits, yaml)
        except (RunError, subprocess.CalledProcessError, OSError, urllib.error.URLError) as e:
            print(f"error: {name}: {e}", file=sys.stderr)
            return 2
        (work / f"{name}.json").write_text(json.dumps(facts[name], indent=1))
    print(f"facts in {work}/upstream.json and {work}/ours.json", file=sys.stderr)
    text, code = report(facts["upstream"], facts["ours"], compatibility)
    print(text)
    return code
