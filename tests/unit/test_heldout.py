"""The simulator's held-out configurations (``benchmarks.harness.heldout``): fixed, apart from every other
run, at Seer's load, and runnable by ``benchmarks.rollout`` as they are written."""

import json

from benchmarks.harness.heldout import HELD_OUT, is_held_out
from benchmarks.harness.manifest import read
from seer_sglang.sim.workload import PRESETS


def test_held_out_seeds_appear_in_no_stored_run():
    """A held-out workload is one no simulator change was checked on: its seed is no stored run's."""
    seen = set()
    for entry in read():
        if entry.benchmark != "rollout" or is_held_out(entry.label):
            continue
        config = entry.load()["config"]
        repeats = config.get("repeats", 1) if config.get("vary_trace") else 1
        seen.update(config["seed"] + r for r in range(repeats))
    assert seen and not seen & {h.seed for h in HELD_OUT}


def test_held_out_runs_cover_every_shape_at_seers_load():
    assert {h.workload for h in HELD_OUT} == set(PRESETS)
    assert len({h.name for h in HELD_OUT}) == len(HELD_OUT) and len({h.instances for h in HELD_OUT}) > 1
    for h in HELD_OUT:
        assert h.prompts >= 8 * h.instances  # at least 8 groups per instance
        args = h.args()
        assert args[args.index("--kv-share") + 1] == "0"  # each instance the profile's own KV
        modes = args[args.index("--modes") + 1].split(",")
        assert {"plain-group", "plain-router", "plain-router-p2", "context", "oracle"} <= set(modes)
        assert h.label.startswith("heldout_") and is_held_out(h.label)


def test_the_report_reads_each_runs_sim_check_and_leaves_invalid_modes_out(tmp_path):
    from benchmarks.harness.heldout import checks

    run = {"sim_check": {"plain-group": {"error": 0.02}, "context": {"error": -0.08},
                         "plain-router-p2": {"error": 0.01, "placement": "recorded"}},
           "emulation": {"per_mode": {"plain-group": [{"overrun_share": 0.0}], "context": [{"overrun_share": 0.2}],
                                      "plain-router-p2": [{"overrun_share": 0.0}]}}}
    rows = checks([("heldout_x", json.loads(json.dumps(run)))])
    assert [(r["mode"], r["valid"]) for r in rows] == [("plain-group", True), ("context", False),
                                                       ("plain-router-p2", True)]
    assert [r["recorded_placement"] for r in rows] == [False, False, True]
