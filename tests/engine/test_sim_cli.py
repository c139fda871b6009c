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
