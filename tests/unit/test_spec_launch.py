"""``--draft`` on the launcher: the SGLang flags and environment each instance gets, and rollout totals."""

import pytest

from seer_sglang.config import DraftConfig, PluginConfig
from seer_sglang.core.accounting import spec_totals
from seer_sglang.core.request import ChunkRecord, Sample, SamplingParams
from seer_sglang.launch.drafting import RunningDrafts, start_drafting


def drafting(drafter: str, tokens: int, paths: int, log_dir, cpu: bool, with_plugin: bool = True, **kw):
    return start_drafting(DraftConfig(drafter=drafter, draft_tokens=tokens, draft_paths=paths, **kw), log_dir,
                          cpu=cpu, with_plugin=with_plugin)


def instance_env(drafts: RunningDrafts) -> dict[str, str]:
    """What an instance's environment holds of the draft settings (the launcher's PluginConfig)."""
    return PluginConfig(**drafts.plugin_settings()).to_env()


def test_instances_get_seer_with_the_drafter_and_server():
    drafts = RunningDrafts("group-suffix", draft_tokens=8, draft_paths=4, cpu=True, address="tcp://127.0.0.1:9")
    args = drafts.instance_args(["--dtype", "float32"])
    assert args[args.index("--speculative-algorithm") + 1] == "SEER"
    assert args[args.index("--speculative-num-draft-tokens") + 1] == "9"  # 8 drafts + the last verified token
    assert args[args.index("--speculative-ngram-max-bfs-breadth") + 1] == "4"
    assert args[args.index("--attention-backend") + 1] == "seer_verify"
    seen = PluginConfig.from_env(instance_env(drafts))
    assert (seen.drafter, seen.draft_server, seen.budget, seen.cost_path) == (
        "group-suffix", "tcp://127.0.0.1:9", "adaptive", None)
    assert "adaptive budget" in drafts.describe()
    assert "every draft verified" in RunningDrafts("group-suffix", cpu=False).describe()  # the log says so


def test_budget_and_profile_reach_the_instances(tmp_path):
    profile = tmp_path / "cost.json"
    profile.write_text('{"base_s": 0.01, "per_seq_s": 0, "per_token_s": 0.001, "accept_curve": [0.5]}')
    drafts = drafting("none", 8, 4, tmp_path, cpu=True, budget="threshold", cost_path=str(profile))
    assert not drafts.enabled
    seen = PluginConfig.from_env(instance_env(RunningDrafts("sam", budget="threshold", cost_path=str(profile))))
    assert seen.drafter == "sam" and seen.budget == "threshold" and seen.cost_path == str(profile.resolve())
    with pytest.raises(ValueError, match="--draft-budget"):
        drafting("suffix", 8, 4, tmp_path, cpu=True, budget="greedy")
    (tmp_path / "bad.json").write_text('{"base_s": 1}')
    with pytest.raises(ValueError, match="missing"):  # a broken profile stops the launcher, not each instance
        drafting("suffix", 8, 4, tmp_path, cpu=True, cost_path=str(tmp_path / "bad.json"))


def test_user_flags_win_and_gpu_keeps_its_backend():
    drafts = RunningDrafts("suffix", cpu=True, address="tcp://127.0.0.1:9")
    assert drafts.instance_args(["--speculative-algorithm", "NGRAM"]) == []
    assert "--attention-backend" not in drafts.instance_args(["--attention-backend=torch_native"])
    assert "--attention-backend" not in RunningDrafts("sam", cpu=False).instance_args([])


def test_none_attached_or_plain_start_nothing(tmp_path):
    for drafts in (drafting("none", 8, 4, tmp_path, cpu=True),
                   drafting("group-suffix", 8, 4, None, cpu=True),  # attached: --instance-urls
                   drafting("group-suffix", 8, 4, tmp_path, cpu=True, with_plugin=False)):
        assert not drafts.enabled and drafts.instance_args([]) == [] and drafts.plugin_settings() == {}
        assert drafts.processes == []
    with pytest.raises(ValueError, match="--draft"):
        drafting("eagle", 8, 4, tmp_path, cpu=True)
    with pytest.raises(ValueError, match="at least 1"):
        drafting("suffix", 0, 4, tmp_path, cpu=True)


def test_acceptance_length_counts_the_bonus_token():
    sample = Sample("g-0", "g", 0, [1, 2], SamplingParams(max_new_tokens=8))
    sample.chunks = [ChunkRecord(0, 0.0, 4, draft_steps=3, accepted_tokens=2),
                     ChunkRecord(1, 1.0, 4, draft_steps=1, accepted_tokens=2)]
    assert spec_totals([sample]) == {"draft_steps": 4, "accepted_tokens": 4, "mean_acceptance_length": 2.0}
    assert spec_totals([Sample("h-0", "h", 0, [1], SamplingParams(max_new_tokens=8))])["mean_acceptance_length"] is None


def test_gpu_instances_sample_with_seeds_unless_told_otherwise():
    from seer_sglang.launch.instances import InstanceSpec, build_command, gpu_default_args, seeded_sampling

    assert gpu_default_args([]) == ["--sampling-backend", "pytorch"]
    assert gpu_default_args(["--sampling-backend", "flashinfer"]) == []  # the user's choice stays
    gpu = build_command(InstanceSpec(model_path="m", port=1, cpu=False, gpus="0"))
    assert gpu[gpu.index("--sampling-backend") + 1] == "pytorch"
    assert "--sampling-backend" not in build_command(InstanceSpec(model_path="m", port=1, cpu=True))
    assert seeded_sampling([]) and seeded_sampling(["--sampling-backend=pytorch"])
    assert not seeded_sampling(["--sampling-backend", "flashinfer"])


def test_cpu_instances_fork_their_children_and_gpu_instances_run_sglangs_launcher():
    """A CPU instance starts through ``cpu_shims.launch_server``, whose one change turns SGLang's
    ``spawn`` into ``fork`` (other start methods pass); a GPU instance runs SGLang's launcher as it is.
    Both are recognised as instances by their command line, a seer launcher is not."""
    from types import SimpleNamespace

    from seer_sglang.cpu_shims import launch_server as forked
    from seer_sglang.launch.instances import InstanceSpec, build_command, is_instance_command

    cpu = build_command(InstanceSpec(model_path="m", port=1, cpu=True))
    gpu = build_command(InstanceSpec(model_path="m", port=1, cpu=False, gpus="0"))
    assert cpu[1:3] == ["-m", "seer_sglang.cpu_shims.launch_server"] and gpu[1:3] == ["-m", "sglang.launch_server"]
    assert is_instance_command(cpu) and is_instance_command(gpu)
    assert not is_instance_command(["python", "-m", "seer_sglang.launch_server", "--port", "1"])

    chosen: list[tuple[str, bool]] = []
    mp = SimpleNamespace(set_start_method=lambda method, force=False: chosen.append((method, force)))
    forked.fork_instead_of_spawn(mp)
    mp.set_start_method("spawn", force=True)
    mp.set_start_method("forkserver")
    assert chosen == [("fork", True), ("forkserver", False)]


def test_without_draft_tokens_each_layout_gets_its_own_ceiling(tmp_path):
    """``--draft-tokens`` unset: 32 where the verify is ragged (the budget gives each request its width, a
    CPU's default), 8 where it pads every request to a width (a GPU's full width, LoRA's buckets); a
    value given is kept in every layout."""
    from seer_sglang.speculative.budget import draft_tokens_for

    for cpu, layout, lora, tokens in ((True, "auto", False, 32), (False, "auto", False, 8),
                                      (True, "auto", True, 8), (True, "full", False, 8),
                                      (False, "ragged", False, 32), (True, "bucketed", False, 8)):
        drafts = start_drafting(DraftConfig(drafter="none", verify_layout=layout), tmp_path, cpu=cpu,
                                sglang_args=["--enable-lora"] if lora else [])
        assert drafts.draft_tokens == tokens, (cpu, layout, lora)
    assert draft_tokens_for("full", 12) == 12 and drafting("none", 5, 4, tmp_path, cpu=True).draft_tokens == 5
    seer = RunningDrafts("group-suffix", draft_tokens=32, address="tcp://127.0.0.1:9").instance_args([])
    assert seer[seer.index("--speculative-num-draft-tokens") + 1] == "33"
