"""Where the launcher puts instances on a GPU machine, checked through the environment it builds for
each instance (no GPU needed): inside the mask it was started under, TP ranks grouped per instance."""

from __future__ import annotations

import pytest

from seer_sglang.launch.instances import InstanceSpec, build_env, plan_gpus, tp_size, visible_gpus


def test_visible_gpus_follow_the_parents_mask():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5, 6,7"}) == ["3", "5", "6", "7"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-aa11,GPU-bb22"}) == ["GPU-aa11", "GPU-bb22"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,-1,4"}) == ["2"]  # CUDA ignores what follows an invalid id


def test_instances_start_only_on_the_masked_gpus(monkeypatch):
    """Ray gave this worker GPUs 3, 5, 6, 7 of an 8-GPU node: no instance may see 0, 1, 2 or 4."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")
    mask = visible_gpus()
    for tp, expect in ((1, ["3", "5", "6", "7"]), (2, ["3,5", "6,7"]), (4, ["3,5,6,7"])):
        plan = plan_gpus(mask, tp)
        assert plan == expect
        for gpus in plan:
            env = build_env(InstanceSpec(model_path="m", port=1, cpu=False, gpus=gpus))
            seen = env["CUDA_VISIBLE_DEVICES"].split(",")
            assert set(seen) <= set(mask) and len(seen) == tp
    assert plan_gpus(mask, 2, instances=1) == ["3,5"]


def test_more_gpus_than_the_mask_holds_is_an_error():
    with pytest.raises(ValueError, match="need 6 GPU"):
        plan_gpus(["0", "1", "2", "3"], 2, instances=3)
    with pytest.raises(ValueError, match="need 2 GPU"):
        plan_gpus(["0"], 2)


def test_tp_size_is_read_from_the_sglang_flags():
    assert tp_size([]) == 1
    assert tp_size(["--tp-size", "4"]) == 4 and tp_size(["--tp=2"]) == 2
