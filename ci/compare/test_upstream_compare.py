"""Unit tests of the comparison behind ci/upstream-compare (no cluster needed).

Run: python3 -m unittest discover -s ci/compare (the workspace test
reconciler/tests/upstream_compare.rs runs them)."""

import io
import json
import subprocess
import sys
import unittest
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import upstream_compare as uc  # noqa: E402


def facts(name):
    return json.loads((HERE / "fixtures" / f"{name}.json").read_text())


class Conversion(unittest.TestCase):
    def test_a_nodewright_becomes_a_skyhook_with_legacy_keys(self):
        obj = {"apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
               "metadata": {"name": "gpu", "annotations": {"nodewright.nvidia.com/pause": "true", "team": "a"},
                            "finalizers": ["nodewright.nvidia.com/nodewright"]},
               "spec": {"packages": {}}}
        out = uc.to_legacy(obj)
        self.assertEqual(out["apiVersion"], "skyhook.nvidia.com/v1alpha1")
        self.assertEqual(out["kind"], "Skyhook")
        self.assertEqual(out["metadata"]["annotations"], {"skyhook.nvidia.com/pause": "true", "team": "a"})
        self.assertEqual(out["metadata"]["finalizers"], ["skyhook.nvidia.com/skyhook"])
        self.assertEqual(obj["kind"], "NodeWright", "the input is left alone")

    def test_a_policy_keeps_its_kind_and_foreign_objects_pass(self):
        policy = {"apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": "p"}}
        self.assertEqual(uc.to_legacy(policy)["apiVersion"], "skyhook.nvidia.com/v1alpha1")
        self.assertEqual(uc.to_legacy(policy)["kind"], "DeploymentPolicy")
        cm = {"apiVersion": "v1", "kind": "ConfigMap"}
        self.assertIs(uc.to_legacy(cm), cm)

    def test_policy_strategies_get_the_webhook_defaults(self):
        policy = {"kind": "DeploymentPolicy", "spec": {
            "default": {"strategy": {"fixed": {"initialBatch": 2}}},
            "compartments": [{"name": "c", "strategy": {"linear": {}}}, {"name": "e", "strategy": {"exponential": {"safetyLimit": 10}}}]}}
        out = uc.webhook_defaults(policy)["spec"]
        self.assertEqual(out["default"]["strategy"]["fixed"], {"initialBatch": 2, "batchThreshold": 100, "safetyLimit": 50})
        self.assertEqual(out["compartments"][0]["strategy"]["linear"],
                         {"initialBatch": 1, "batchThreshold": 100, "safetyLimit": 50, "delta": 1})
        self.assertEqual(out["compartments"][1]["strategy"]["exponential"],
                         {"safetyLimit": 10, "initialBatch": 1, "batchThreshold": 100, "growthFactor": 2})

    def test_prefixes_are_normalised(self):
        self.assertEqual(uc.prefixed({"skyhook.nvidia.com/nodeState_a": "1", "nodewright.nvidia.com/status_a": "2",
                                      "other/x": "3"}), {"nodeState_a": "1", "status_a": "2"})


class Compartments(unittest.TestCase):
    policy = {"spec": {"compartments": [
        {"name": "canary", "selector": {"matchLabels": {"pool": "canary"}}},
        {"name": "prod", "selector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["prod"]}]}},
    ]}}

    def test_the_first_matching_compartment_wins_else_the_default(self):
        self.assertEqual(uc.compartment_of(self.policy, {"pool": "canary"}), "canary")
        self.assertEqual(uc.compartment_of(self.policy, {"pool": "prod"}), "prod")
        self.assertEqual(uc.compartment_of(self.policy, {"pool": "other"}), "__default__")
        self.assertEqual(uc.compartment_of(None, {"pool": "prod"}), "__default__")

    def test_expression_operators(self):
        m = uc.selector_matches
        self.assertTrue(m({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": "1"}))
        self.assertFalse(m({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}))
        self.assertTrue(m({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["2"]}]}, {"a": "1"}))


class Convergence(unittest.TestCase):
    def cr(self, generation, observed, status):
        return {"metadata": {"generation": generation}, "status": {"observedGeneration": observed, "status": status}}

    def test_complete_at_the_expected_generation(self):
        self.assertTrue(uc.converged({"gpu": self.cr(2, 2, "complete")}, {"gpu": 2}))
        self.assertFalse(uc.converged({"gpu": self.cr(1, 1, "complete")}, {"gpu": 2}), "the change is not applied yet")
        self.assertFalse(uc.converged({"gpu": self.cr(2, 1, "complete")}, {"gpu": 2}), "the change is not observed yet")
        self.assertFalse(uc.converged({"gpu": self.cr(2, 2, "in_progress")}, {"gpu": 2}))
        self.assertFalse(uc.converged({}, {"gpu": 1}))


class Batches(unittest.TestCase):
    def test_a_node_starting_after_the_open_batch_completed_opens_the_next(self):
        ev = lambda kind, node: {"kind": kind, "node": node, "cr": "gpu"}
        events = [ev("exec", "a"), ev("exec", "b"), ev("exec", "a"), ev("complete", "a"), ev("exec", "c"),
                  ev("complete", "b"), ev("complete", "c"), ev("exec", "d")]
        comps = {"gpu": {n: "__default__" for n in "abcd"}}
        self.assertEqual(uc.batch_membership(events, comps),
                         {"gpu/__default__": {"1": ["a", "b", "c"], "2": ["d"]}})


class Recording(unittest.TestCase):
    def recorder(self):
        now = uc.datetime.now(uc.timezone.utc)
        return uc.Recorder("http://127.0.0.1:1", uc.VirtualClock(now, now, 1.0), "skyhooks",
                           "skyhook.nvidia.com", "skyhook")

    @staticmethod
    def pod(uid, phase, deleting=False, inits=()):
        meta = {"name": f"p-{uid}", "namespace": "skyhook", "uid": uid, "resourceVersion": "7",
                "annotations": {"skyhook.nvidia.com/package":
                                json.dumps({"name": "driver", "version": "1", "stage": "apply"})}}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        statuses = [{"name": f"i{i}", "state": {"terminated": {"exitCode": code}} if code is not None
                     else {"running": {}}} for i, code in enumerate(inits)]
        return {"metadata": meta, "spec": {"nodeName": "n1"},
                "status": {"phase": phase, "initContainerStatuses": statuses}}

    def test_a_pod_whose_init_containers_all_ended_or_one_failed_has_finished(self):
        self.assertTrue(uc.pod_finished(self.pod("a", "Running", inits=(0, 0))))
        self.assertTrue(uc.pod_finished(self.pod("a", "Running", inits=(0, 3, None))))
        self.assertTrue(uc.pod_finished(self.pod("a", "Succeeded")))
        self.assertFalse(uc.pod_finished(self.pod("a", "Running", inits=(0, None))))
        self.assertFalse(uc.pod_finished(self.pod("a", "Pending")))

    def test_a_stage_execution_deleted_while_it_ran_is_recorded_once(self):
        r = self.recorder()
        r._observe("pods", "ADDED", self.pod("a", "Running"))
        r._observe("pods", "MODIFIED", self.pod("a", "Running", deleting=True))
        r._observe("pods", "DELETED", self.pod("a", "Running", deleting=True))
        r._observe("pods", "ADDED", self.pod("b", "Running", inits=(None,)))
        r._observe("pods", "MODIFIED", self.pod("b", "Running", inits=(0,)))
        r._observe("pods", "DELETED", self.pod("b", "Running", deleting=True, inits=(0,)))
        self.assertEqual([(e["kind"], e["node"], e["detail"]) for e in r.events],
                         [("exec", "n1", "driver/apply"), ("stopped", "n1", "driver/apply"),
                          ("exec", "n1", "driver/apply")])

    def test_a_finished_stage_taken_back_by_a_node_write_is_undone(self):
        def state(**entries):
            return {"nodeState_gpu": json.dumps({k: {"stage": st, "state": s} for k, (st, s) in entries.items()})}
        was = state(**{"driver|1": ("apply", "complete"), "tuning|1": ("post-interrupt", "complete")})
        self.assertEqual(uc.undone_entries(was, state(**{"driver|1": ("apply", "in_progress"),
                                                         "tuning|1": ("post-interrupt", "complete")})),
                         [("nodeState_gpu", "driver|1")])
        # Moving on, and a configuration change going back to config, undo nothing.
        self.assertEqual(uc.undone_entries(was, state(**{"driver|1": ("config", "in_progress"),
                                                         "tuning|1": ("config", "in_progress")})), [])
        self.assertEqual(uc.undone_entries(was, {"nodeState_gpu": "not json"}), [])

    def test_the_recorder_notes_an_undone_stage_on_the_node(self):
        r = self.recorder()
        def node(state):
            return {"metadata": {"name": "n1", "resourceVersion": "3", "labels": {},
                                 "annotations": {"skyhook.nvidia.com/nodeState_gpu":
                                                 json.dumps({"driver|1": {"stage": "apply", "state": state}})}}}
        for s in ("in_progress", "complete", "in_progress", "complete"):
            r._observe("nodes", "MODIFIED", node(s))
        self.assertEqual([(e["kind"], e["node"], e["detail"]) for e in r.events],
                         [("undone", "n1", "driver|1 gpu")])


class Report(unittest.TestCase):
    def test_a_deliberate_and_an_unexplained_divergence(self):
        divergences = uc.compare(facts("upstream"), facts("ours"))
        keys = [(d.key, d.subject) for d in divergences]
        self.assertEqual(keys, [("cordoned-at-end", "phase 1 node-1"), ("execution-kind", "phase 1")])
        entries = {"execution-kind": "Stage executions are Jobs"}
        self.assertEqual(uc.explain(divergences, entries), 1)
        self.assertEqual(divergences[1].explained_by, "Stage executions are Jobs")

    def test_sequences_differing_in_the_cordon_or_a_repeated_stage_have_keys_of_their_own(self):
        up = ["driver/apply", "cordon", "driver/config", "reboot", "uncordon"]
        ours = ["cordon", "driver/apply", "driver/config", "reboot", "uncordon"]
        self.assertEqual(uc.sequence_key(up, ours), "sequence:cordon-order")
        again = ["driver/apply", "cordon", "driver/apply", "driver/config", "reboot", "uncordon"]
        self.assertEqual(uc.sequence_key(again, ours), "sequence:repeated-attempt")
        self.assertEqual(uc.sequence_key(["driver/apply", "driver/apply"], ["driver/apply"]),
                         "sequence:repeated-attempt")
        apart = ["driver/apply", "driver/config", "driver/apply"]
        self.assertEqual(uc.sequence_key(apart, ["driver/apply", "driver/config"]), "sequence")
        self.assertEqual(uc.sequence_key(["driver/apply", "reboot"], ["driver/apply"]), "sequence")

    def test_identical_facts_have_no_divergence(self):
        self.assertEqual(uc.compare(facts("upstream"), facts("upstream")), [])

    def test_entries_are_read_from_compare_tags(self):
        text = "- **Jobs, not bare pods** (compare: execution-kind) because …\n- **Other** no tag\n"
        self.assertEqual(uc.deliberate_entries(text), {"execution-kind": "Jobs, not bare pods"})

    def test_the_command_reports_and_exits_by_the_unexplained_count(self):
        out = subprocess.run([sys.executable, str(ROOT / "ci/upstream-compare"), "--facts",
                              str(HERE / "fixtures/upstream.json"), str(HERE / "fixtures/ours.json")],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 1, out.stderr)
        lines = out.stdout.rstrip("\n").splitlines()
        self.assertEqual(lines[-1], "unexplained divergences: 1")
        self.assertIn("| controller CPU seconds | 4.0 | 1.0 | 0.25 |", out.stdout)
        self.assertRegex(out.stdout, r"`execution-kind` phase 1: upstream Pod; ours Job — deliberate: ")
        self.assertIn("`cordoned-at-end` phase 1 node-1: upstream False; ours True — **unexplained**", out.stdout)

    def test_usage_errors_exit_2(self):
        for argv in ([], ["--manager", "/nonexistent", "--fleet", "x", "--repo", "y"], ["--bogus"],
                     ["--facts", "/nonexistent/a.json", "/nonexistent/b.json"]):
            err = io.StringIO()
            with redirect_stderr(err), redirect_stdout(io.StringIO()):
                self.assertEqual(uc.main(argv, ROOT), 2, argv)
            self.assertIn("usage: ci/upstream-compare", err.getvalue() + uc.USAGE)


if __name__ == "__main__":
    unittest.main()
