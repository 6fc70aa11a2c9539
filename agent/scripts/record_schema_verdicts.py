"""Records the upstream v1 JSON Schemas' verdicts on mutated config documents, for
agent/tests/config_schema_baseline.rs.

Needs the `jsonschema` package and the two upstream schema files (not part of this repository):

    python3 -m venv /tmp/jsv && /tmp/jsv/bin/pip install jsonschema
    /tmp/jsv/bin/python agent/scripts/record_schema_verdicts.py <dir with v1/*.json> \
        > agent/tests/fixtures/schema/verdicts.jsonl
"""
import copy
import json
import pathlib
import sys

import jsonschema
from referencing import Registry, Resource

root = pathlib.Path(sys.argv[1])
agent = json.loads((root / "v1/skyhook-agent-schema.json").read_text())
step = json.loads((root / "v1/step-schema.json").read_text())
registry = Registry().with_resources(
    [(s["$id"], Resource.from_contents(s)) for s in (agent, step)]
)
validator = jsonschema.Draft202012Validator(agent, registry=registry)

STEP = {"name": "s", "path": "s.sh", "arguments": [], "returncodes": [0], "on_host": True,
        "idempotence": True, "upgrade_step": False, "env": {}}
BASE = {"schema_version": "v1", "package_name": "p", "package_version": "1.0.0",
        "expected_config_files": [], "modes": {"apply": [STEP], "apply-check": [STEP]}}
WRONG_TYPES = [None, 0, 1.5, True, "x", [], {}, ["x"], [1]]

docs = []

def doc(**top):
    d = copy.deepcopy(BASE)
    d.update(top)
    return d

def with_step(**fields):
    d = copy.deepcopy(BASE)
    d["modes"]["apply"][0].update(fields)
    return d

for v in ["1.0.0", "0.0.0", "10.20.30", "1.0.0-dev", "1.0.0-0", "1.0.0-00", "1.0.0-0a", "1.0.0-a.1",
          "1.0.0-a..1", "1.0.0+b", "1.0.0+b.01", "1.0.0-rc.1+b.2", "1.0.0+", "1.0.0-", "1.0", "1",
          "a", "v1.0.0", "01.0.0", "1.00.0", "1.0.00", "2024.12.19", "2024.01.01", "1.0.0_",
          " 1.0.0", "1.0.0 ", "1.0.0\n", "1.0.0\n\n", "\n1.0.0", "1.0.0\r", "١.0.0", "1.0.0-α",
          "1.0.0+-", "1.0.0--", "1.0.0-x-y", "1.2.3.4", "", "1.0.0+b+c", "1.0.0-a+b-c"]:
    docs.append(doc(package_version=v))
for n in ["s", "a.b-c_d", "has space", "", "ünï", "x/y", "x\n", "x\n\n", "-", ".", "a$"]:
    docs.append(with_step(name=n))
for field in ["name", "path", "arguments", "returncodes", "on_host", "idempotence", "upgrade_step", "env"]:
    for w in WRONG_TYPES:
        docs.append(with_step(**{field: w}))
    d = copy.deepcopy(BASE)
    del d["modes"]["apply"][0][field]
    docs.append(d)
for rc in [[0], [], [-1], [0, 2], [0.0], [1.5], [True], [2**70], ["0"], [None]]:
    docs.append(with_step(returncodes=rc))
for env in [{}, {"A": "x"}, {"A": 1}, {"": ""}, {"A": None}]:
    docs.append(with_step(env=env))
for field in ["schema_version", "package_name", "package_version", "expected_config_files", "modes"]:
    for w in WRONG_TYPES:
        docs.append(doc(**{field: w}))
    d = copy.deepcopy(BASE)
    del d[field]
    docs.append(d)
docs.append(doc(extra="allowed", root_dir=5))
docs.append(doc(modes={"apply": [STEP], "apply-check": [STEP], "upgrade": "x"}))
docs.append(doc(modes={"apply": [STEP], "apply-check": [STEP], "upgrade": [1]}))
docs.append(doc(modes={}))
docs.append(doc(expected_config_files=["a", 1]))
docs.append(with_step(extra_key=1))

def nodewright_deviation(d):
    """Documented NodeWright deviations (docs/decisions.md, Agent): return codes must be JSON
    integers that fit 64 bits."""
    for mode in d.get("modes", {}).values() if isinstance(d.get("modes"), dict) else []:
        for st in mode if isinstance(mode, list) else []:
            rcs = st.get("returncodes") if isinstance(st, dict) else None
            if isinstance(rcs, list) and any(
                isinstance(r, float) or (isinstance(r, int) and not isinstance(r, bool)
                                         and not -2**63 <= r < 2**63) for r in rcs):
                return "reject: returncodes must be 64-bit JSON integers"
    return None

for d in docs:
    # Upstream picks the schema by schema_version; only "v1" has one (spec §6.3).
    valid = d.get("schema_version") == "v1" and validator.is_valid(d)
    rec = {"doc": d, "valid": valid}
    dev = nodewright_deviation(d)
    if dev and valid:
        rec["nodewright"] = dev
    print(json.dumps(rec))
print(f"{len(docs)} documents, jsonschema {jsonschema.__version__ if hasattr(jsonschema, '__version__') else ''}",
      file=sys.stderr)
