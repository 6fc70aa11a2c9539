"""Differential run: the upstream Python agent and nodewright-agent on identical busybox roots.

Runs fixture packages through both agents (chroot, so run as root with busybox-static), then
compares exit codes, every file written under the root (timestamps normalised, the upstream
helper's Python traceback after a failed command dropped) and the console lines that matter.
Not a CI test: it needs the upstream source, which stays out of this repository.

    git clone https://github.com/NVIDIA/skyhook /tmp/skyhook
    python3.13 -m venv /tmp/up313 && /tmp/up313/bin/pip install jsonschema
    UPSTREAM_SRC=/tmp/skyhook/agent/skyhook-agent/src UPSTREAM_PYTHON=/tmp/up313/bin/python \
    OURS=$CARGO_TARGET_DIR/debug/nodewright-agent python3 agent/scripts/differential.py [scenario...]

Known, deliberate differences (docs/decisions.md, Agent): `SUCEEDED:` lines show raw `env:`
arguments, not their values; `INTERRUPT FAILED` shows the command's real exit status.
"""
import os, re, shutil, subprocess, sys, json, base64, pathlib

FIX = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures"
OURS = os.environ.get("OURS", "target/debug/nodewright-agent")
UP = [os.environ.get("UPSTREAM_PYTHON", "python3.13"), "-m", "skyhook_agent.controller"]
COPY = "/var/lib/skyhook/nw/pkg-1.0.0-uid-3"
APPLETS = "sh cat echo env pwd mkdir printf sleep kill ls test true false touch date cut grep sed tr wc rm cp head id dirname basename cmp".split()

def make_root(base, pkg, extra=None):
    root = pathlib.Path(base) / "root"
    if root.exists(): shutil.rmtree(base)
    (root / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "bin/busybox")
    for a in APPLETS: os.symlink("busybox", root / "bin" / a)
    (root / "tmp").mkdir()
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-a\n")
    shutil.copytree(pkg, root / COPY.lstrip("/"))
    for d in ["usr/bin", "sbin", "usr/sbin"]: (root / d).mkdir(parents=True, exist_ok=True)
    (root / "usr/bin/systemctl").write_text('#!/bin/sh\necho "systemctl $*" >> /tmp/calls.log\n[ "$2" = bad ] && exit 4\nexit 0\n'); os.chmod(root / "usr/bin/systemctl", 0o755)
    (root / "usr/sbin/service").write_text('#!/bin/sh\necho "service $*" >> /tmp/calls.log\n'); os.chmod(root / "usr/sbin/service", 0o755)
    if extra: extra(root)
    return root

def env(rid="nw-uid-3_pkg_1.0.0", **kw):
    e = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "COPY_RESOLV": "false",
         "SKYHOOK_RESOURCE_ID": rid, "SKYHOOK_ROOT_DIR": "/var/lib/skyhook/nw", "SKYHOOK_LOG_DIR": "/var/log/skyhook/nw",
         "PYTHONPATH": os.environ.get("UPSTREAM_SRC", ""), "NODEWRIGHT_AGENT_STEP_DELAY_MS": "0", "DEMO_ARG": "demo"}
    e.update(kw); return e

TS = [(re.compile(r"\d{4}-\d{2}-\d{2}-\d{6}"), "TS"), (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(\+00:00)?"), "ISO"),
      (re.compile(r"^\d+\.\d+$"), "EPOCH"), (re.compile(r"-(up|ours)/root"), "-X/root")]
def norm(s):
    for r, t in TS: s = r.sub(t, s)
    return s

def snapshot(root):
    out = {}
    for p in sorted(pathlib.Path(root).rglob("*")):
        rel = str(p.relative_to(root))
        if rel.startswith(("bin", "proc", "usr", "sbin")) or rel.startswith(COPY.lstrip("/")): continue
        if p.is_file():
            try: c = p.read_text()
            except Exception: c = "<binary>"
            c = norm(c)
            i = c.find("[err]ISO Traceback")
            if i >= 0:  # upstream helper's traceback after a failed command
                c = c[:i] + "[err]ISO " if i > 0 else ""
            out[norm(rel)] = c
    return out

def run(cmd, e):
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr

def scenario(name, pkg, steps, extra=None):
    results = {}
    for who in ["up", "ours"]:
        root = make_root(f"{WORK}/{name}-{who}", pkg, extra)
        codes = []
        for mode, payload, e in steps:
            args = [mode, str(root), COPY] + ([payload] if payload else [])
            cmd = (UP if who == "up" else [OURS]) + args
            code, out, err = run(cmd, e)
            codes.append(code)
            if who == "up" and code not in (0, 1): print("UP ODD", mode, code, err[-500:])
            results.setdefault(who + "_out", []).append((mode, out, err))
        results[who] = (codes, snapshot(root))
    (uc, us), (oc, os_) = results["up"], results["ours"]
    ok = True
    if uc != oc: print(f"[{name}] exit codes differ: up={uc} ours={oc}"); ok = False
    for k in sorted(set(us) | set(os_)):
        if k not in os_: print(f"[{name}] only upstream: {k}: {us[k][:200]!r}"); ok = False
        elif k not in us: print(f"[{name}] only ours: {k}: {os_[k][:200]!r}"); ok = False
        elif us[k] != os_[k]: print(f"[{name}] content differs {k}:\n  up:   {us[k][:400]!r}\n  ours: {os_[k][:400]!r}"); ok = False
    key = re.compile(r"^(SUCEEDED|FAILED|Skipping|INTERRUPT FAILED|Flag exists|WARNING|no existing|Failed to load|It does not|apply|config|upgrade|uninstall|post-interrupt)")
    lines = lambda who: [norm(l) for _, out, _ in results[who + "_out"] for l in out.splitlines() if key.match(l)]
    if lines("up") != lines("ours"):
        ok = False
        print(f"[{name}] console lines differ:\n  up:   {lines('up')}\n  ours: {lines('ours')}")
    print(f"[{name}] {'SAME' if ok else 'DIFFERENT'} exit codes {uc}")
    return results

WORK = os.environ.get("DIFF_WORK", "/tmp/nodewright-diff")
b64 = lambda s: base64.b64encode(s.encode()).decode()
if __name__ == "__main__":
    which = sys.argv[1:] or ["shell", "checks", "upgrade", "interrupts", "nvidia", "knobs", "invalid", "history"]
    E = env()
    if "shell" in which:
        r = scenario("shell", FIX / "shellscript", [(m, None, E) for m in
            ["apply", "apply-check", "apply", "config", "config-check", "post-interrupt", "post-interrupt-check", "uninstall", "uninstall-check"]])
    if "checks" in which:
        scenario("checks", FIX / "checks-fail", [(m, None, E) for m in ["apply", "apply-check", "bogus-mode"]])
    if "upgrade" in which:
        def hist(root):
            h = root / "var/lib/skyhook/nw/history"; h.mkdir(parents=True)
            (h / "upgrader.json").write_text('{"current-version": "1.4.0", "history": [{"version": "1.4.0", "time": "2026-01-01T00:00:00+00:00"}]}')
        scenario("upgrade", FIX / "upgrade", [(m, None, E) for m in ["upgrade", "upgrade-check"]], hist)
    if "interrupts" in which:
        scenario("interrupts", FIX / "checks-fail", [
            ("interrupt", b64('{"type": "service_restart", "services": ["a", "bad", "c"]}'), E),
            ("interrupt", b64('{"type": "restart_all_services"}'), env(rid="nw-uid-4_pkg_1.0.0")),
            ("interrupt", b64('{"type": "no_op"}'), env(rid="nw-uid-5_pkg_1.0.0")),
        ])
    if "nvidia" in which:
        def cms(root):
            c = root / COPY.lstrip("/") / "configmaps"; c.mkdir(parents=True, exist_ok=True)
            (c / "service").write_text("gke"); (c / "accelerator").write_text("h100")
        scenario("nvidia", FIX / "nvidia-setup", [(m, None, env(rid="g-u-2_nvidia-setup_0.2.1", NVIDIA_SETUP_INSTALL_KERNEL="1")) for m in ["apply", "apply-check", "post-interrupt-check"]], cms)

    if "knobs" in which:
        def longlines(root):
            sd = root / COPY.lstrip("/") / "skyhook_dir"
            (sd / "install.sh").write_text("#!/bin/sh\nprintf 'abcdefghijklmnop\\nxyz\\n'; printf 'e1\\ne2' >&2\n")
        scenario("knobs", FIX / "checks-fail", [
            ("apply", None, env(SKYHOOK_AGENT_BUFFER_LIMIT="4")),
            ("apply", None, env(OVERLAY_ALWAYS_RUN_STEP="TRUE")),
            ("apply", None, env(SKYHOOK_AGENT_WRITE_LOGS="False")),
            ("apply", None, E),
        ], longlines)
    if "invalid" in which:
        def cfg(mutate):
            def f(root):
                p = root / COPY.lstrip("/") / "config.json"
                d = json.loads(p.read_text()); mutate(d); p.write_text(json.dumps(d))
            return f
        def rm_check(d): del d["modes"]["apply-check"]
        def only_checks(d): del d["modes"]["apply"]
        def bad_mode(d): d["modes"]["reboot"] = []
        def bad_version(d): d["package_version"] = "1.0"
        def latest(d): d["schema_version"] = "latest"
        def env_arg(d): d["modes"]["apply"][0]["arguments"] = ["env:NOPE_A", "env:NOPE_B"]
        def missing_file(d): d["modes"]["apply"][0]["path"] = "nope.sh"
        def upgrade_in_apply(d): d["modes"]["apply"][0]["upgrade_step"] = True
        for n, m in [("rm_check", rm_check), ("only_checks", only_checks), ("bad_mode", bad_mode),
                     ("bad_version", bad_version), ("latest", latest), ("env_arg", env_arg),
                     ("missing_file", missing_file), ("upgrade_in_apply", upgrade_in_apply)]:
            scenario(f"invalid-{n}", FIX / "checks-fail", [("apply", None, E), ("apply-check", None, E)], cfg(m))
        def cm(root):
            p = root / COPY.lstrip("/") / "config.json"
            d = json.loads(p.read_text()); d["expected_config_files"] = ["needed"]
            d["modes"]["uninstall"] = d["modes"]["apply"]; d["modes"]["uninstall-check"] = d["modes"]["apply-check"]
            p.write_text(json.dumps(d))
            o = root / COPY.lstrip("/") / "root_dir/etc/overlay"; o.mkdir(parents=True); (o / "x.conf").write_text("x")
        scenario("configmap", FIX / "checks-fail", [("apply", None, E), ("uninstall", None, E), ("uninstall-check", None, E)], cm)
    if "history" in which:
        def corrupt(root):
            h = root / "var/lib/skyhook/nw/history"; h.mkdir(parents=True)
            (h / "upgrader.json").write_text("{broken")
        scenario("history-corrupt", FIX / "upgrade", [(m, None, E) for m in ["upgrade", "apply-check", "upgrade-check"]], corrupt)
        def config_only(root):
            p = root / COPY.lstrip("/") / "config.json"
            d = json.loads(p.read_text()); d["modes"] = {"config": d["modes"]["apply"], "config-check": d["modes"]["apply-check"]}
            p.write_text(json.dumps(d))
        scenario("config-only", FIX / "upgrade", [(m, None, E) for m in ["apply", "apply-check", "config", "config-check", "post-interrupt-check", "uninstall-check"]], config_only)
