"""What every server of one rollout benchmark run shares, made from its flags: the workloads (one per
repeat), the instances' KV cap and engine flags, and the emulation they pad their steps to."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import time
from pathlib import Path

from benchmarks.harness.emulation import emulation_settings
from benchmarks.harness.manifest import resolve
from benchmarks.harness.simulate import MOVE_COST
from benchmarks.harness.workload import (Workload, build_workload, compact_vocabulary, load_recording,
                                         prompt_tokenizer, replay_for_warmup, workload_seeds, workload_shape)
from seer_sglang.config import DRAFT, SCHEDULER, EmulationConfig, PluginConfig
from seer_sglang.core.step_model import StepModel
from seer_sglang.launch.emulation import instance_env, plugin_settings
from seer_sglang.launch.instances import has_cuda
from seer_sglang.models import resolve_model_path, vocab_size as model_vocab_size
from seer_sglang.sim.workload import PRESETS, kv_cap, working_set
from seer_sglang.speculative.budget import draft_tokens_for, verify_layout


@dataclasses.dataclass
class Setup:
    """What every server of one run shares: its workloads (one per repeat), the instances' KV cap and
    engine flags, and the emulation they pad their steps to."""

    args: argparse.Namespace
    model_path: str
    spec: object  # the workload's shape (``WorkloadSpec``)
    works: list[Workload]
    emulated: StepModel | None
    length_scale: float
    emulation: EmulationConfig
    engine_args: list[str]
    log_root: Path

    @property
    def cpu(self) -> bool:
        return not has_cuda()

    @property
    def machine(self) -> str:
        return f"{'CPU' if self.cpu else 'GPU'} {platform.machine()}, {os.cpu_count()} cores"

    @property
    def emulate_flags(self) -> list[str]:
        """The seer launcher's flags for the same emulation."""
        if self.emulated is None:
            return []
        args = self.args
        flags = ["--emulate", args.emulate, "--emulate-time-scale", str(args.emulate_time_scale),
                 "--emulate-length-scale", str(self.length_scale)]
        return flags + (["--emulate-step-log", args.emulate_step_log] if args.emulate_step_log else [])

    @property
    def plain_env(self) -> dict[str, str]:
        """The plain instances get the launcher's emulation settings, and no other seer hook."""
        env = (PluginConfig(**plugin_settings(self.emulation), emulation_only=True).to_env()
               if self.emulated is not None else {})
        return {**env, **instance_env(self.emulation)}


def prepare(args: argparse.Namespace) -> Setup:
    """The run's workloads, KV cap and emulation from its flags (filling the flags' defaults in ``args``)."""
    # the instances' draft budget counts the batch's KV read: recorded, so the simulator rebuilds this run
    # with it (runs without the key were made before it did)
    args.budget_kv_read = True
    # the frontend's KV headroom (the server's default; a mode's ``+h<x>`` overrides it), recorded likewise
    args.kv_headroom = SCHEDULER.kv_headroom
    # the draft tokens of the instances' own verify layout (ragged on a CPU), recorded likewise
    args.draft_tokens = draft_tokens_for(verify_layout("auto", cpu=not has_cuda()))
    # and the instances' draft paths (the server's default), recorded likewise
    args.draft_paths = DRAFT.draft_paths
    # and how the frontend prices a move (by the emulated profile where the instances are emulated)
    args.move_cost = MOVE_COST
    preset = PRESETS[args.workload]
    args.group_size = args.group_size or preset.group_size
    args.kv_share = args.kv_share if args.kv_share is not None else preset.kv_share
    if args.warmup_prompts is None:
        args.warmup_prompts = args.instances
    emulated, length_scale = emulation_settings(args)
    model_path = resolve_model_path(args.model)
    recording = json.loads(resolve(args.replay).read_text()) if args.replay else None
    tokenizer = prompt_tokenizer(args, recording)
    spec = workload_shape(args)
    seeds = workload_seeds(args)
    by_seed = {}
    for seed in seeds:
        by_seed[seed] = build_workload(argparse.Namespace(**{**vars(args), "seed": seed}), tokenizer, spec)
        if recording is not None:
            by_seed[seed].replay = load_recording(recording, args, seed, by_seed[seed].prompts)
            by_seed[seed].warm_replay = replay_for_warmup(by_seed[seed].warm_trace, by_seed[seed].replay)
    vocab_size = model_vocab_size(model_path)
    if compact_vocabulary(list(by_seed.values()), vocab_size, {work.eos for work in by_seed.values()}
                          | set(tokenizer.tok.all_special_ids)) is not None:
        print(f"tokens mapped one to one into the model's vocabulary of {vocab_size}", flush=True)
    works = [by_seed[s] for s in seeds] if args.vary_trace else [by_seed[args.seed]] * args.repeats
    if args.kv_tokens is None and args.kv_share == 0:
        if emulated is None:
            raise SystemExit("--kv-share 0 (the profile's capacity) needs --emulate")
        args.kv_tokens = emulated.capacity_tokens
    if args.kv_tokens is None:  # with --vary-trace: the mean over the repeats' workloads
        args.kv_tokens = int(statistics.fmean(kv_cap(by_seed[s].trace, args.instances, args.kv_share) for s in seeds))
    print(f"workload {args.workload}: {len(works[0].trace)} samples, working set {working_set(works[0].trace)} "
          f"tokens, KV {args.kv_tokens} tokens per instance x {args.instances}", flush=True)
    if emulated is not None:
        emulated = dataclasses.replace(emulated, capacity_tokens=args.kv_tokens)
        print(f"EMULATION: {emulated.name}, lengths x{length_scale:g}, time x{args.emulate_time_scale:g}", flush=True)
    log_root = Path(f"/tmp/seer-bench-{int(time.time())}")
    log_root.mkdir(parents=True)
    # --enable-metrics: every instance, plain or seer, counts its retractions on /metrics
    engine_args = ["--max-total-tokens", str(args.kv_tokens), "--dtype", args.dtype,
                   "--enable-custom-logit-processor", "--enable-metrics"]
    emulation = EmulationConfig(args.emulate, args.emulate_time_scale, length_scale, args.emulate_step_log)
    return Setup(args, model_path, spec, works, emulated, length_scale, emulation, engine_args, log_root)


