"""Workflows of the official Python Kubernetes client against `nodewright sim serve`, run by
reconciler/tests/sim_serve_clients.rs. Usage: python3 client_workflows.py KUBECONFIG

Prints one `ok <step>` line per step that behaved as on a real API server; any other
behaviour raises, and the exit code is non-zero.
"""
import sys
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
batch = client.BatchV1Api()

nodes = core.list_node()
names = sorted(n.metadata.name for n in nodes.items)
assert names, "no nodes"
first = names[0]
print("ok list nodes", " ".join(names))

# The client sends a dict body as a strategic merge patch: only the named label changes.
patched = core.patch_node(first, {"metadata": {"labels": {"team": "python"}}})
assert patched.metadata.labels["team"] == "python", patched.metadata.labels
assert "kubernetes.io/hostname" in patched.metadata.labels, patched.metadata.labels
print("ok strategic merge patch of node labels")

# A watch from the list's resourceVersion replays the change made after the list.
seen = False
w = watch.Watch()
for event in w.stream(core.list_node, resource_version=nodes.metadata.resource_version,
                      timeout_seconds=10):
    node = event["object"]
    if event["type"] == "MODIFIED" and (node.metadata.labels or {}).get("team") == "python":
        seen = True
        w.stop()
assert seen
print("ok watch from a resourceVersion saw the label")

# With nothing changing, the server ends the watch when its timeout passes.
started = time.monotonic()
events = list(watch.Watch().stream(core.list_node, resource_version=patched.metadata.resource_version,
                                   timeout_seconds=2))
elapsed = time.monotonic() - started
assert events == [] and 1.5 <= elapsed < 10, (events, elapsed)
print("ok watch ended by its timeout")

core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py-team")))
core.create_namespaced_config_map(
    "py-team", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"k": "v"}))
assert core.read_namespaced_config_map("settings", "py-team").data == {"k": "v"}
print("ok namespace and configmap created")

try:
    core.read_namespaced_config_map("absent", "py-team")
    raise AssertionError("reading a missing configmap succeeded")
except ApiException as e:
    assert e.status == 404 and e.reason == "Not Found", (e.status, e.reason)
    assert '"reason":"NotFound"' in e.body.replace(" ", ""), e.body
print("ok missing configmap is a 404 NotFound")

# The typed API refuses unknown fields itself, so the request is made at the client's HTTP
# layer, as a generic client would send it.
api = core.api_client
request = api.param_serialize(
    "POST", "/api/v1/namespaces/{namespace}/configmaps", path_params={"namespace": "py-team"},
    query_params=[("fieldValidation", "Strict")],
    header_params={"Content-Type": "application/json", "Accept": "application/json"},
    body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typo"}, "datum": {}},
    auth_settings=["BearerToken"])
response = api.call_api(*request)
body = response.read().decode()
assert response.status == 400 and 'unknown field \\"datum\\"' in body, (response.status, body)
print("ok strict field validation refused datum")

# Without a directive the server warns (Warn is the default) and drops the field.
request = api.param_serialize(
    "POST", "/api/v1/namespaces/{namespace}/configmaps", path_params={"namespace": "py-team"},
    header_params={"Content-Type": "application/json", "Accept": "application/json"},
    body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typo"}, "datum": {}},
    auth_settings=["BearerToken"])
response = api.call_api(*request)
body = response.read().decode()
warning = response.getheader("Warning") or ""
assert response.status == 201 and "datum" not in body, (response.status, body)
assert warning == '299 - "unknown field \\"datum\\""', warning
print("ok unknown field warned about and dropped")

# The dynamic client finds kinds through discovery, custom resources included.
from kubernetes.dynamic import DynamicClient
dynamic = DynamicClient(api)
crds = dynamic.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
names = sorted(c.metadata.name for c in crds.get().items)
assert "nodewrights.nodewright.nvidia.com" in names, names
nodewrights = dynamic.resources.get(api_version="nodewright.nvidia.com/v1alpha1", kind="NodeWright")
assert nodewrights.namespaced is False and nodewrights.get().items == []
print("ok dynamic client found NodeWright through discovery")

core.create_namespaced_config_map(
    "py-team", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dry")), dry_run="All")
try:
    core.read_namespaced_config_map("dry", "py-team")
    raise AssertionError("a dry-run create was stored")
except ApiException as e:
    assert e.status == 404, e.status
print("ok dry run stored nothing")

job = client.V1Job(
    metadata=client.V1ObjectMeta(name="hello"),
    spec=client.V1JobSpec(template=client.V1PodTemplateSpec(spec=client.V1PodSpec(
        restart_policy="Never",
        containers=[client.V1Container(name="hello", image="example/hello:1")]))))
batch.create_namespaced_job("py-team", job)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    status = batch.read_namespaced_job_status("hello", "py-team").status
    if status.succeeded == 1:
        break
    time.sleep(0.2)
assert status.succeeded == 1 and status.completion_time is not None, status
assert any(c.type == "Complete" and c.status == "True" for c in status.conditions), status
print("ok job succeeded")
