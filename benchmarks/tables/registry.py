"""Which renderer makes each marked table of the docs (``TABLES``), and from which runs."""

from __future__ import annotations

from typing import Callable


from .format import Results, pick
from .drafting import _recording_label, draft_server_table, drafter_append_table, drafter_lookup_table, replay_batch_table, replay_references_table, replay_widths_table, spec_acceptance_table, spec_budget_table, text_acceptance_table
from .glance import glance_table
from .gpu import cascade_verify_table, gpu_attention_table, gpu_step_table, sched_cost_table, sim_profile_table
from .rollout import emulated_pool_table, emulated_table, emulation_check_table, methodology_table, rollout_table, sim_ablation_table, sim_bounds_table, sim_check_table, sim_errors_table, sim_heldout_table, sim_load_table, router_probe_table, sim_recheck_table, sim_profiles_table, sim_steps_table, sim_spec_table, targets_table
from .serving import default_pool_table, kv_pool_table, load_table, multiturn_table, slo_frontier_table, slo_load_table, slo_table, soak_table, transfer_table


# ---------------------------------------------------------------- registry

ROLLOUT = r"cpu_(?!transfer).*"

# The emulated runs "Results at a glance" (docs/benchmarks.md) quotes, in its order: each one's targets are tabled.
TARGET_RUNS = ("emulated_h100_qwen2vl_workloads_x20", "emulated_h100_qwen2vl_workloads_x30",
               "emulated_h100_qwen2vl_group_x45",
               "emulated_h100_moonlight_workloads_ties",
               "emulated_h100_qwen2vl_sd_x60_t0.6_4k_warm", "emulated_h100_moonlight_sd_x30_t0.6_4k_warm",
               "emulated_h100_moonlight_sd_x30_t0.6_4k_spread",
               "emulated_h100_moonlight_sd_x30_t0.6_4k_oracle")

TABLES: dict[str, Callable[[Results], str]] = {
    "methodology": methodology_table,
    "glance": glance_table,
    "emulated_h100_qwen2vl": lambda r: emulated_table(r, "emulated_h100_qwen2vl"),
    "emulated_h100_qwen2vl_seerload_x30": lambda r: emulated_table(r, "emulated_h100_qwen2vl_seerload_x30"),
    "sim_bounds_qwen2vl_seerload": lambda r: sim_bounds_table(r, "sim_bounds_qwen2vl_seerload"),
    "emulated_h100_qwen2vl_seerload_sd_x45":
        lambda r: emulated_table(r, "emulated_h100_qwen2vl_seerload_sd_x45"),
    "emulated_h100_qwen2vl_seerload_ablation_x45":
        lambda r: emulated_table(r, "emulated_h100_qwen2vl_seerload_ablation_x45"),
    "emulated_h100_moonlight_seerload_x45": lambda r: emulated_table(r, "emulated_h100_moonlight_seerload_x45"),
    "emulated_h100_qwen2vl_seerload_plain_sample_x45":
        lambda r: emulated_table(r, "emulated_h100_qwen2vl_seerload_plain_sample_x45"),
    "emulated_h100_v2_qwen2vl_seerload_ablation_x45":
        lambda r: emulated_table(r, "emulated_h100_v2_qwen2vl_seerload_ablation_x45"),
    "targets_seerload": lambda r: targets_table(r, ["emulated_h100_qwen2vl_seerload_ablation_x45",
                                                    "emulated_h100_moonlight_seerload_x45"]),
    "sim_ablation_tree_attention": lambda r: sim_profiles_table(r, ["sim_ablation_qwen2vl_seerload_h100_70b",
                                                                    "sim_ablation_qwen2vl_seerload_h100_70b_v2"]),
    "sim_load_qwen2vl_seerload": lambda r: sim_load_table(r, [f"sim_load_qwen2vl_seerload_p{p}" for p in (32, 64, 128)]),
    "emulated_h100_moonlight_2x16_headroom_x30":
        lambda r: emulated_table(r, "emulated_h100_moonlight_2x16_headroom_x30"),
    "emulated_h100_qwen2vl_2x32_x25": lambda r: emulated_table(r, "emulated_h100_qwen2vl_2x32_x25"),
    "emulated_h100_qwen2vl_seerload_d32_x45": lambda r: emulated_table(r, "emulated_h100_qwen2vl_seerload_d32_x45"),
    "emulated_h100_moonlight_seerload_d32_x45":
        lambda r: emulated_table(r, "emulated_h100_moonlight_seerload_d32_x45"),
    "emulated_h100_qwen2vl_seerload_p16_x45": lambda r: emulated_table(r, "emulated_h100_qwen2vl_seerload_p16_x45"),
    "sim_admission_qwen2vl": lambda r: sim_load_table(r, [f"sim_admission_qwen2vl_p{p}" for p in (64, 128)]),
    "sim_admission_moonlight": lambda r: sim_load_table(r, [f"sim_admission_moonlight_p{p}" for p in (64, 128)]),
    "sim_errors": sim_errors_table,
    "sim_errors_superseded": lambda r: sim_errors_table(r, "superseded"),
    "sim_heldout": sim_heldout_table,
    "recheck_router_p2_random": lambda r: sim_recheck_table(r, "recheck_router_p2_random"),
    "recheck_ragged_verify_pricing": lambda r: sim_recheck_table(r, "recheck_ragged_verify_pricing", every_mode=True),
    "recheck_heldout_steps": lambda r: sim_steps_table(r, "recheck_heldout_steps"),
    "router_probe": lambda r: router_probe_table(r, "cache_aware_miss_rule"),
    "recheck_router_miss_rule": lambda r: sim_recheck_table(r, "recheck_router_miss_rule", every_mode=True),
    "recheck_queue_order_targets": lambda r: sim_recheck_table(r, "recheck_queue_order_targets", every_mode=True),
    "recheck_seerload_runs": lambda r: sim_recheck_table(r, "recheck_seerload_runs", every_mode=True),
    "recheck_heldout_r3_router_record":
        lambda r: sim_recheck_table(r, "recheck_heldout_r3_router_record", every_mode=True),
    "recheck_heldout_r4_r5_latch": lambda r: sim_recheck_table(r, "recheck_heldout_r4_r5_latch", every_mode=True),
    "recheck_admission_latch":
        lambda r: sim_recheck_table(r, "recheck_admission_latch", every_mode=True, moved=0.01),
    "recheck_overlap_linger":
        lambda r: sim_recheck_table(r, "recheck_overlap_linger", every_mode=True, moved=0.01),
    "recheck_shared_prefix":
        lambda r: sim_recheck_table(r, "recheck_shared_prefix", every_mode=True, moved=0.01),
    "sim_plain_sample_qwen2vl_seerload_ablation":
        lambda r: sim_bounds_table(r, "sim_plain_sample_qwen2vl_seerload_ablation"),
    "sim_plain_sample_moonlight_seerload": lambda r: sim_bounds_table(r, "sim_plain_sample_moonlight_seerload"),
    "emulated_h100_qwen2vl_x15": lambda r: emulated_table(r, "emulated_h100_qwen2vl_x15"),
    "emulated_pool": lambda r: emulated_pool_table(r, "emulated_h100_qwen2vl_pool"),
    "emulated_h100_qwen2vl_workloads_x20": lambda r: emulated_table(r, "emulated_h100_qwen2vl_workloads_x20"),
    "emulated_h100_qwen2vl_workloads_x30": lambda r: emulated_table(r, "emulated_h100_qwen2vl_workloads_x30"),
    "emulated_h100_qwen2vl_group_x45": lambda r: emulated_table(r, "emulated_h100_qwen2vl_group_x45"),
    "sim_bounds_qwen2vl": lambda r: sim_bounds_table(r, "sim_bounds_qwen2vl"),
    "targets": lambda r: targets_table(r, [s for s in TARGET_RUNS if "targets" in r[s]]),
    "emulated_h100_qwen2vl_workloads": lambda r: emulated_table(r, "emulated_h100_qwen2vl_workloads"),
    "emulated_h100_moonlight_workloads": lambda r: emulated_table(r, "emulated_h100_moonlight_workloads"),
    "emulated_h100_moonlight_workloads_ties": lambda r: emulated_table(r, "emulated_h100_moonlight_workloads_ties"),
    "emulated_h100_qwen2vl_sd": lambda r: emulated_table(r, "emulated_h100_qwen2vl_sd_x30_plain"),
    "sim_bounds_moonlight": lambda r: sim_bounds_table(r, "sim_bounds_moonlight"),
    "replay_widths_seerload": lambda r: replay_widths_table(r, {
        "Qwen2-VL": "widths_text_smollm2_qwen2vl_32_t0.6_seeds012_d32",
        "Moonlight": "widths_text_smollm2_moonlight_32_t0.6_seeds012_d32"}),
    "replay_draft_paths": lambda r: replay_widths_table(r, {
        "Qwen2-VL, Seer's load": "paths_text_smollm2_qwen2vl_32_t0.6_seeds012",
        "Moonlight, Seer's load": "paths_text_smollm2_moonlight_32_t0.6_seeds012",
        "Qwen2-VL, one workload": "paths_text_smollm2_qwen2vl_32_t0.6",
        "Qwen2-VL, one workload, t=1": "paths_text_smollm2_qwen2vl_32",
        "4 x 8, t=1": "paths_spec_outputs_cpu_smollm2",
        "4 x 8, t=1, 1,024 tokens": "paths_spec_outputs_cpu_smollm2_1024",
        "4 x 8, t=0.6": "paths_spec_outputs_cpu_smollm2_t0.6",
        "4 x 8, t=0.6, 1,024 tokens": "paths_spec_outputs_cpu_smollm2_t0.6_1024",
        "4 x 8, t=0.8": "paths_spec_outputs_cpu_smollm2_t0.8"}, by_recording=True),
    "sim_draft_paths_moonlight_seerload": lambda r: sim_bounds_table(r, "sim_draft_paths_moonlight_seerload"),
    "sim_draft_paths_qwen2vl_seerload": lambda r: sim_bounds_table(r, "sim_draft_paths_qwen2vl_seerload"),
    "text_acceptance_t06": lambda r: text_acceptance_table(r, "acceptance_text_smollm2_qwen2vl_32_t0.6"),
    "sim_bounds_qwen2vl_sd": lambda r: sim_bounds_table(r, "sim_bounds_qwen2vl_sd"),
    "emulated_h100_qwen2vl_sd_t06": lambda r: emulated_table(r, "emulated_h100_qwen2vl_sd_x30_t0.6"),
    "emulated_h100_qwen2vl_sd_t06_x60": lambda r: emulated_table(r, "emulated_h100_qwen2vl_sd_x60_t0.6"),
    "emulated_h100_qwen2vl_sd_t06_x60_4k": lambda r: emulated_table(r, "emulated_h100_qwen2vl_sd_x60_t0.6_4k"),
    "emulated_h100_qwen2vl_sd_t06_x60_4k_warm":
        lambda r: emulated_table(r, "emulated_h100_qwen2vl_sd_x60_t0.6_4k_warm"),
    "emulated_h100_moonlight_sd_t06_x30_4k": lambda r: emulated_table(r, "emulated_h100_moonlight_sd_x30_t0.6_4k"),
    "emulated_h100_moonlight_sd_t06_x30_4k_rerun":
        lambda r: emulated_table(r, "emulated_h100_moonlight_sd_x30_t0.6_4k_rerun"),
    "emulated_h100_moonlight_sd_t06_x30_4k_warm":
        lambda r: emulated_table(r, "emulated_h100_moonlight_sd_x30_t0.6_4k_warm"),
    "sim_bounds_moonlight_sd": lambda r: sim_bounds_table(r, "sim_bounds_moonlight_sd"),
    "emulated_h100_moonlight_sd_t06_x30_4k_spread":
        lambda r: emulated_table(r, "emulated_h100_moonlight_sd_x30_t0.6_4k_spread"),
    "emulated_h100_measured_qwen2vl_sd":
        lambda r: emulated_table(r, "emulated_h100_measured_qwen2vl_sd_x45_t0.6_4k"),
    "emulation_check": lambda r: emulation_check_table(r, "emulation_check_cpu"),
    "text_acceptance": lambda r: text_acceptance_table(r, "acceptance_text_smollm2_qwen2vl_32"),
    "rollout_cpu_tiny": lambda r: rollout_table([r["cpu_tiny"]], ["cpu_tiny"]),
    "rollout_cpu_smollm2": lambda r: rollout_table([r["cpu_smollm2"]], ["cpu_smollm2"],
                                                   exclude=("context+sd", "context+sd-suffix")),
    "rollout_cpu_smollm2_sd": lambda r: rollout_table([r[s] for s in pick(r, r"cpu_smollm2_sd(_rerun)?")],
                                                      pick(r, r"cpu_smollm2_sd(_rerun)?")),
    "sim_check": lambda r: sim_check_table(r, [s for s in pick(r, ROLLOUT) if "sim_check" in r[s]]),
    "sim_ablation": lambda r: sim_ablation_table(r, _sim_order(r)),
    "sim_speculation": lambda r: sim_spec_table(r, _sim_order(r)),
    "sched_cost": lambda r: sched_cost_table(r, ["sched_cost"]),
    "cascade_verify": lambda r: cascade_verify_table(r, pick(r, r"cascade_verify_.*")),
    "gpu_step": lambda r: gpu_step_table(r, "gpu_step_NVIDIA_H100_80GB_HBM3", "gpu_step_NVIDIA_H100_80GB_HBM3_flashinfer",
                                         "gpu_step_NVIDIA_H100_80GB_HBM3_rerun"),
    "gpu_attention": lambda r: gpu_attention_table(r, "gpu_attention_NVIDIA_H200", "gpu_attention_NVIDIA_H200_fa2"),
    "gpu_attention_h100": lambda r: gpu_attention_table(r, "gpu_attention_NVIDIA_H100_80GB_HBM3"),
    "sim_profile_measured": lambda r: sim_profile_table(
        r, [(f"sim_h100_{w}", f"sim_gpu_step_measured_{w}") for w in ("moonlight", "qwen2vl")]),
    "transfer": lambda r: transfer_table(r, pick(r, r"cpu_transfer_.*")),
    "kv_pool": lambda r: kv_pool_table(r, pick(r, r"kv_pool_cpu_.*")),
    "load": lambda r: load_table(r, "load_cpu"),
    "soak": lambda r: soak_table(r, "soak_cpu"),
    "multiturn": lambda r: multiturn_table(r, ["multiturn_cpu_tiny_paired_nodraft_nometrics",
                                               "multiturn_cpu_tiny_paired_nodraft_nometrics_seed1",
                                               "multiturn_cpu_tiny_paired_nometrics"]),
    "multiturn_metrics_on": lambda r: multiturn_table(r, ["multiturn_cpu_tiny_paired", "multiturn_cpu_tiny_paired_nodraft",
                                                          "multiturn_cpu_tiny_paired_nodraft_again"]),
    "multiturn_sequential": lambda r: multiturn_table(r, ["multiturn_cpu_tiny", "multiturn_cpu_tiny_nodraft"]),
    "slo": lambda r: slo_table(r, "slo_cpu"),
    "slo_emulated": lambda r: slo_table(r, "slo_emulated_h100"),
    "slo_emulated_frontier": lambda r: slo_frontier_table(r, "slo_emulated_h100"),
    "slo_emulated_load": lambda r: slo_load_table(r, "slo_emulated_h100"),
    "slo_emulated_light": lambda r: slo_table(r, "slo_emulated_h100_light"),
    "slo_emulated_light_load": lambda r: slo_load_table(r, "slo_emulated_h100_light"),
    "default_pool": lambda r: default_pool_table(r, pick(r, r"default_pool_cpu_.*")),
    "drafter_lookup": lambda r: drafter_lookup_table(r, ["drafters_cpu"]),
    "drafter_append": lambda r: drafter_append_table(r, ["drafters_cpu"]),
    "draft_server": lambda r: draft_server_table(r, ["drafters_cpu"]),
    "spec_acceptance": lambda r: spec_acceptance_table(
        r, [s for s in pick(r, r"spec_acceptance_.*") if r[s]["config"].get("budget") == "full"]),
    "spec_budget": lambda r: spec_budget_table(
        r, [s for s in pick(r, r"spec_acceptance_.*") if r[s]["config"].get("budget") != "full"]),
    "replay_batch": lambda r: replay_batch_table(r, _replay_order(r, r"draft_replay_.*_(together|staggered)")),
    "replay_references": lambda r: replay_references_table(r, _replay_order(r, r"draft_replay_.*_references")),
}


def _sim_order(results: Results) -> list[str]:
    order = {"moonlight": 0, "qwen2vl": 1, "kimik2": 2}
    return sorted(pick(results, r"sim_h100_.*"), key=lambda s: (order.get(s.rsplit("_", 1)[-1], 9), s))


def _replay_order(results: Results, pattern: str) -> list[str]:
    """Recordings by temperature (high first), then max tokens, then arrival."""
    def key(s: str):
        temp, max_tokens = _recording_label(results[s]["config"]["outputs"])
        return (int(max_tokens.replace(",", "")), -float(temp), s)
    return sorted(pick(results, pattern), key=key)
