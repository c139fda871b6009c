"""The step-time model shared by the simulator and the emulated instances."""

import dataclasses
import json

import pytest

from seer_sglang.core.step_model import StepModel, load_profile, profile_names

ROOF = StepModel(name="roof", decode_base_s=0.005, decode_per_seq_s=2e-5, decode_per_kv_token_s=1e-8,
                 prefill_per_token_s=3e-5, capacity_tokens=1_000_000, weight_read_s=0.006,
                 compute_per_token_s=3e-5, attention_per_pair_s=5e-10)


def test_a_step_takes_the_larger_of_memory_and_compute():
    # small batch: the weight read dominates; large batch: the tokens' compute does
    assert ROOF.decode_step(8, 0) == pytest.approx(0.005 + 8 * 2e-5 + 0.006)
    assert ROOF.decode_step(512, 0) == pytest.approx(0.005 + 512 * 2e-5 + 512 * 3e-5)
    # KV read adds to the memory side only; a verify's tree tokens to the compute side only
    assert ROOF.decode_step(8, 100_000) == pytest.approx(0.005 + 8 * 2e-5 + 0.006 + 1e-3)
    assert ROOF.decode_step(8, 0, tokens=8 * 8) == ROOF.decode_step(8, 0)
    assert ROOF.decode_step(64, 0, tokens=64 * 8) > ROOF.decode_step(64, 0)


@pytest.mark.parametrize("batch,kv", [(8, 0), (190, 0), (190, 10_000), (400, 500_000), (1, 0)])
def test_macro_steps_equal_the_sum_of_single_steps(batch, kv):
    """The closed form crosses from compute- to memory-bound where the growing KV read overtakes."""
    stepwise = sum(ROOF.decode_step(batch, kv + batch * k) for k in range(300))
    assert ROOF.decode_steps(300, batch, kv) == pytest.approx(stepwise, rel=1e-9)
    linear = dataclasses.replace(ROOF, weight_read_s=0.0, compute_per_token_s=0.0)
    assert linear.decode_steps(300, batch, kv) == pytest.approx(
        sum(linear.decode_step(batch, kv + batch * k) for k in range(300)), rel=1e-9)


LONE = dataclasses.replace(ROOF, decode_lone_kv_token_s=1e-6)
TREE = dataclasses.replace(LONE, tree_attention=True)


def test_a_few_long_sequences_cost_what_the_longest_takes_to_read():
    """The attention kernel reads a sequence serially: one 4,096-token sequence costs as much as 64 of
    them would by bandwidth alone, and a batch of short ones is priced by bandwidth as before."""
    assert LONE.decode_step(1, 4096, longest=4096) == pytest.approx(0.005 + 2e-5 + 0.006 + 4096e-6)
    assert LONE.decode_step(64, 64 * 4096, longest=4096) == pytest.approx(
        LONE.fixed_s(64) + 0.006 + max(64 * 4096 * 1e-8, 4096e-6))
    assert LONE.decode_step(512, 512 * 10, longest=10) == ROOF.decode_step(512, 512 * 10)
    assert ROOF.decode_step(1, 4096, longest=4096) == ROOF.decode_step(1, 4096)  # not modelled: unchanged
    scaled = LONE.scaled(0.01, 10)
    assert scaled.decode_step(1, 41, longest=41) == pytest.approx(10 * LONE.decode_step(1, 4100, longest=4100))


@pytest.mark.parametrize("batch,kv,longest,growth,longest_growth", [
    (1, 100, 100, 1, 1), (64, 64 * 200, 300, 64, 1), (64, 64 * 20, 40, 64, 2.5), (400, 500_000, 2000, 400, 1),
    (8, 8 * 5000, 5000, 8, 0), (8, 0, 0, 8, 1)])
def test_macro_steps_with_a_long_sequence_equal_the_sum_of_single_steps(batch, kv, longest, growth, longest_growth):
    """The lone sequence's read, the batch's read and (with tree attention) a verify's compute all grow
    linearly: the closed form switches between them where the single steps do."""
    for model in (LONE, TREE):
        for tokens in (None, batch * 4, batch * 16):
            stepwise = sum(model.decode_step(batch, kv + growth * k, tokens, longest + longest_growth * k)
                           for k in range(300))
            assert model.decode_steps(300, batch, kv, tokens, growth, longest, longest_growth) == pytest.approx(
                stepwise, rel=1e-9)


def test_a_verify_pays_its_tree_nodes_attention_on_the_compute_side():
    """Each tree node after a request's first attends to the request's context: at a long context a wide
    verify turns compute-bound, where without the term it stays on the KV read."""
    batch, kv = 64, 64 * 40_000
    assert TREE.decode_step(batch, kv) == LONE.decode_step(batch, kv)  # a decode: one token per request
    wide = TREE.decode_step(batch, kv, tokens=batch * 16)
    compute = 3e-5 * batch * 16 + 5e-10 * 15 * kv
    assert wide == pytest.approx(TREE.fixed_s(batch) + compute)
    assert compute > 0.006 + 1e-8 * kv > 3e-5 * batch * 16  # compute-bound only with the tree's attention
    assert LONE.decode_step(batch, kv, tokens=batch * 16) == pytest.approx(TREE.fixed_s(batch) + 0.006 + 1e-8 * kv)


def test_prefill_prices_attention_to_cached_and_earlier_tokens():
    alone = ROOF.prefill(4096)
    after = ROOF.prefill(4096, cached=32_768)
    assert after - alone == pytest.approx(5e-10 * 4096 * 32_768)
    assert ROOF.prefill_batch([10, 10], [0, 0]) == pytest.approx(ROOF.decode_base_s + ROOF.weight_read_s)
    fitted = dataclasses.replace(ROOF, weight_read_s=0.0, attention_per_pair_s=0.0)  # a CPU fit: linear
    assert fitted.prefill(1000) == pytest.approx(1000 * 3e-5)


def test_a_prefill_fixed_cost_adds_to_prefills_only():
    """``prefill_base_s`` (an eager step's launches) is paid by every prefill, hidden by no compute,
    and by no decode step; a shortened run charges its share of it, as of the other fixed costs."""
    eager = dataclasses.replace(ROOF, prefill_base_s=0.01)
    for n, c in [(10, 0), (4096, 0), (4096, 32_768)]:
        assert eager.prefill(n, c) == pytest.approx(ROOF.prefill(n, c) + 0.01)
    assert eager.decode_step(64, 10_000) == ROOF.decode_step(64, 10_000)
    assert eager.scaled(0.1, 2.0).prefill(400, 400) == pytest.approx(eager.prefill(4000, 4000) * 0.1 * 2.0)


def test_scaling_keeps_a_shortened_run_shaped_like_the_full_one():
    """Lengths x 1/10: the same batch over a tenth of the KV tokens costs the same per step, the
    instance holds a tenth of the tokens, and a prefill's time shrinks by a tenth, fixed cost and
    all (the shortened run has a tenth of the decode steps and as many prefills)."""
    short = ROOF.scaled(0.1, 1.0)
    assert short.capacity_tokens == 100_000
    assert short.decode_step(64, 50_000) == pytest.approx(ROOF.decode_step(64, 500_000))
    assert short.prefill(400, 400) == pytest.approx(ROOF.prefill(4000, 4000) * 0.1)
    assert short.prefill(1, 400) == pytest.approx(ROOF.prefill(10, 4000) * 0.1, rel=0.01)
    slow = ROOF.scaled(1.0, time_scale=3.0)
    assert slow.decode_step(64, 1000) == pytest.approx(3 * ROOF.decode_step(64, 1000))


def test_shipped_profiles_load_and_a_bad_one_is_named(tmp_path):
    assert {"h100-70b", "moe-kimi-k2", "cpu-smollm2"} <= set(profile_names())
    dense, moe = load_profile("h100-70b"), load_profile("moe-kimi-k2")
    assert moe.kv_bytes_per_token < dense.kv_bytes_per_token / 4  # MLA: its own, much smaller KV
    # memory-bound at rollout batch sizes: a full batch costs little more per step than a lone request
    assert dense.decode_step(128, 0) < 1.5 * dense.decode_step(1, 0)
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "decode_base_s": 0.1, "typo_s": 1}')
    with pytest.raises(ValueError, match="typo_s"):
        load_profile(str(bad))
    with pytest.raises(ValueError, match="no step-time profile"):
        load_profile("no-such-profile")


def test_the_launcher_sizes_emulated_instances_from_the_profile():
    from seer_sglang.config import EmulationConfig, PluginConfig
    from seer_sglang.launch import emulation

    config = EmulationConfig(profile="h100-70b", time_scale=4.0, length_scale=0.01)
    assert emulation.instance_args(config, []) == ["--max-total-tokens", "13000", "--max-running-requests", "1024"]
    assert emulation.instance_args(config, ["--max-total-tokens", "999"]) == ["--max-running-requests", "1024"]
    assert emulation.instance_args(EmulationConfig(), []) == []
    env = PluginConfig(**emulation.plugin_settings(config)).to_env()
    back = PluginConfig.from_env(env)
    assert (back.emulate, back.emulate_time_scale, back.emulate_length_scale) == ("h100-70b", 4.0, 0.01)
    with pytest.raises(ValueError, match="no step-time profile"):
        emulation.emulated_model(EmulationConfig(profile="h100-7b"))


def test_a_fit_with_measured_batches_interpolates_between_them(tmp_path):
    """A CPU step is not linear in the batch; a fit that kept its measured points uses them, with the
    KV read on top, and a saved fit loads back the same."""
    fit = StepModel(name="cpu", decode_base_s=0.07, decode_per_seq_s=0.009, decode_per_kv_token_s=2e-5,
                    prefill_per_token_s=4e-3, capacity_tokens=2048,
                    decode_batch_s=((1, 0.075), (2, 0.120), (4, 0.140), (16, 0.210)))
    assert fit.decode_step(2, 0) == pytest.approx(0.120)
    assert fit.decode_step(3, 0) == pytest.approx(0.130)
    assert fit.decode_step(3, 500) == pytest.approx(0.130 + 500 * 2e-5)
    assert fit.decode_step(28, 0) == pytest.approx(0.210 + 12 * 0.070 / 12)  # along the last segment
    assert fit.decode_steps(10, 3, 100) == pytest.approx(sum(fit.decode_step(3, 100 + 3 * k) for k in range(10)))
    assert fit.scaled(1.0, 10).decode_step(3, 0) == pytest.approx(1.30)
    fit.save(tmp_path / "fit.json")
    assert StepModel.load(tmp_path / "fit.json") == fit
    assert StepModel(**json.loads(json.dumps(dataclasses.asdict(fit)))) == fit  # an instance's report
    linear = dataclasses.replace(fit, decode_batch_s=())
    assert linear.decode_step(3, 0) == pytest.approx(0.07 + 3 * 0.009)
