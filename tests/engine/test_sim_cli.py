"""The simulator's command line, in an interpreter of its own (``python -m seer_sglang.sim``)."""

import dataclasses


def test_sim_cli_scales_a_workload_like_the_emulated_testbed(tmp_path):
    """``--max-tokens`` and ``--time-scale`` give the simulator the model an emulated instance pads to
    (the same ``StepModel.scaled``) and SGLang's admission scaled alike."""
    import json
    import subprocess
    import sys

    from seer_sglang.core.step_model import Admission, emulated_model

    out = tmp_path / "sim.json"
    subprocess.run([sys.executable, "-m", "seer_sglang.sim", "--workload", "qwen2vl", "--instances", "2",
                    "--prompts", "8", "--max-tokens", "256", "--time-scale", "10", "--prompt-len", "40,90",
                    "--chunk-size", "32", "--policies", "round-robin,context", "--quick", "--out", str(out)],
                   check=True, capture_output=True)
    report = json.loads(out.read_text())
    model = report["config"]["step_model"]
    want = emulated_model("h100-70b", 256 / 40_960, 10)
    assert model["decode_per_kv_token_s"] == want.decode_per_kv_token_s and model["decode_base_s"] == want.decode_base_s
    assert report["config"]["workload_spec"]["max_tokens"] == 256
    assert report["config"]["workload_spec"]["prompt_len"] == [40, 90]
    assert list(report["ablation"]) == ["round-robin", "context"]
    assert report["config"]["admission"] == dataclasses.asdict(Admission().scaled(256 / 40_960))


def test_the_simulator_stores_its_run_as_a_benchmark_result(tmp_path):
    """``python -m benchmarks.sim`` takes the simulator's flags and stores the run as every benchmark
    does: a run folder with the report beside the command, commit and machine, and its plot."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    argv = ["--workload", "qwen2vl", "--instances", "2", "--prompts", "4", "--max-tokens", "128",
            "--prompt-len", "20,40", "--chunk-size", "32", "--policies", "round-robin,context", "--quick",
            "--out", str(tmp_path / "sim_small")]
    done = subprocess.run([sys.executable, "-m", "benchmarks.sim", *argv], cwd=root, check=True,
                          capture_output=True, text=True)
    assert "ablation" in done.stdout
    (folder,) = (tmp_path / "sim").iterdir()
    assert folder.name.endswith("-sim_small")
    data = json.loads((folder / "result.json").read_text())
    assert data["meta"]["command"] == "python -m benchmarks.sim " + " ".join(argv)
    assert data["meta"]["git"]["commit"] and data["meta"]["emulated"] is False
    assert list(data["ablation"]) == ["round-robin", "context"]
    assert data["ablation"]["round-robin"]["ratio_throughput"] == 1.0
    assert data["config"]["samples"] == 4 * data["config"]["workload_spec"]["group_size"]
    assert (folder / "plot.png").stat().st_size > 0
