"""Recorded model text for emulated rollouts: what a real model writes for a benchmark's workload.

    python -m benchmarks.record_text --workload qwen2vl --prompts 32 --max-tokens 256 --seeds 0,1,2,3 \
        --out benchmarks/results/text_smollm2_qwen2vl_32.json

Speculative decoding gains what its drafts are accepted, and acceptance is a property of the text.
An emulated run's model is tiny and random, so its own text says nothing about acceptance. This
records what SmolLM2 writes for every sample of the benchmark's workload (the same prompts and hidden
target lengths as ``benchmarks.rollout`` builds from the same arguments), on plain SGLang on this
machine's CPU, at temperature 1. ``benchmarks.rollout --model tiny-smollm2 --replay FILE`` then forces
each sample to write exactly its recorded text (``benchmarking/force_length.py``): the real drafters,
draft server and verify path see SmolLM2's text while each step costs what the emulated profile says.

Each sample ends at its target length, as in the benchmark (EOS is banned before it and forced at it),
so a recording belongs to one workload, prompt count, group size, max tokens and set of seeds (one
workload per seed, for ``benchmarks.rollout --vary-trace``, whose repeat r runs seed + r).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import httpx

from benchmarks.harness.result import start as start_run
from benchmarks.harness.workload import KEYS, build_workload, prompts_digest, workload_shape
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, start_instance,
                                            stop_instances, wait_healthy)
from seer_sglang.models import resolve_model_path
from seer_sglang.sim.workload import PRESETS


async def record(urls: list[str], work, max_tokens: int, temperature: float) -> list[dict]:
    """Every sample of the workload; ``[{"prompt": ids, "outputs": [ids per sample index]}]`` by group,
    the form ``benchmarks.draft_replay`` reads."""
    from seer_sglang.benchmarking.force_length import ForceLengthProcessor, custom_params

    processor = ForceLengthProcessor.to_str()
    out = [{"prompt": ids, "outputs": []} for ids in work.prompts]
    for s in work.trace:
        out[s.group_id]["outputs"].append(None)

    async def one(http: httpx.AsyncClient, url: str, sample) -> None:
        ids = work.prompts[sample.group_id]
        body = {"input_ids": ids, "custom_logit_processor": processor,
                "sampling_params": {"max_new_tokens": max_tokens, "temperature": temperature,
                                    "custom_params": custom_params(len(ids), sample.output_len, work.eos)}}
        r = await http.post(f"{url}/generate", json=body)
        r.raise_for_status()
        got = r.json()["output_ids"]
        if len(got) != sample.output_len or got[-1] != work.eos:
            raise RuntimeError(f"sample {sample.group_id}-{sample.sample_index}: {len(got)} tokens, "
                               f"target {sample.output_len}")
        out[sample.group_id]["outputs"][sample.sample_index] = got

    async with httpx.AsyncClient(timeout=None) as http:
        await asyncio.gather(*(one(http, urls[i % len(urls)], s) for i, s in enumerate(work.trace)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.record_text")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--workload", default="qwen2vl", choices=sorted(PRESETS))
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=None, help="default: the workload's (Seer's G)")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--seeds", default="0", help="workload seeds, one recorded workload each (e.g. 0,1,2,3)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", required=True, help="names the run (benchmarks.harness.result)")
    args = ap.parse_args()
    run = start_run("record_text", args.out)
    preset = PRESETS[args.workload]
    args.group_size = args.group_size or preset.group_size
    args.warmup_prompts = 0

    from seer_sglang.frontend.tokenizer import PromptTokenizer

    model_path = resolve_model_path(args.model)
    tokenizer = PromptTokenizer(model_path)
    spec = workload_shape(args)
    works = {}
    for seed in (int(s) for s in args.seeds.split(",")):
        args.seed = seed
        works[seed] = build_workload(args, tokenizer, spec)
    logs = Path(f"/tmp/seer-record-{int(time.time())}")
    logs.mkdir(parents=True)
    specs = [InstanceSpec(model_path=model_path, port=free_port(), with_plugin=False, log_path=logs / f"{i}.log",
                          sglang_args=["--dtype", args.dtype, "--enable-custom-logit-processor"],
                          cpu_threads=cpu_threads_per_instance(args.instances)) for i in range(args.instances)]
    procs = [start_instance(s) for s in specs]
    try:
        wait_healthy(procs)
        start = time.time()
        workloads = []
        for seed, work in works.items():
            groups = asyncio.run(record([p.url for p in procs], work, args.max_tokens, args.temperature))
            workloads.append({"seed": seed, "prompts_sha": prompts_digest(work.prompts), "groups": groups})
            print(f"seed {seed}: {len(work.trace)} samples recorded", flush=True)
        elapsed = time.time() - start
    finally:
        stop_instances(procs)
    config = {**{k: getattr(args, k) for k in KEYS}, "seeds": list(works), "model": args.model,
              "temperature": args.temperature, "dtype": args.dtype, "vocab_size": len(tokenizer.tok),
              "eos": next(iter(works.values())).eos}
    out = run.write({"config": config, "workloads": workloads}, indent=None)
    tokens = sum(len(o) for w in workloads for g in w["groups"] for o in g["outputs"])
    print(f"recorded {len(workloads)} workloads, {tokens} tokens in {elapsed:.0f} s -> {out}")


if __name__ == "__main__":
    main()
