"""What every mode of a rollout benchmark runs: the prompts, the hidden target lengths and, with a
recording, the text each sample writes. The benchmarks, the simulator's rechecks and the recorder build
workloads here alike, so one set of arguments gives one workload wherever it is rebuilt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re

from benchmarks.harness.manifest import resolve
from seer_sglang.models import resolve_model_path
from seer_sglang.sim.workload import PRESETS, TraceSample, generate


TEMPLATES = [
    "A farmer has {a} apples and buys {b} more baskets with {c} apples each. How many apples does he have? "
    "Show your reasoning step by step.",
    "Solve for x: {a}x + {b} = {c}. Explain each step.",
    "A train travels {a} km in {b} hours, then {c} km in 2 hours. What is its average speed? Think step by step.",
    "What is the sum of all integers from {a} to {c}? Show the derivation.",
    "A rectangle has a perimeter of {c} cm and one side of {a} cm. What is its area? Reason carefully.",
    "Compute {a} * {b} - {c} and check the result in a second way.",
]


BASELINE_RID = re.compile(r"^b(?P<group>\d+)-(?P<index>\d+)$")  # what ``baseline_rid`` writes


def baseline_rid(group_id: int, sample_index: int) -> str:
    """A plain SGLang request's rid: the benchmark sends it, ``benchmarks.step_log`` reads plain requests
    by it, and the simulator's check replays the router's placement recorded by it."""
    return f"b{group_id}-{sample_index}"


def parse_baseline_rid(rid: str) -> tuple[int, int]:
    """``baseline_rid``'s (group, sample index) back from its rid."""
    match = BASELINE_RID.match(rid)
    if match is None:
        raise ValueError(f"{rid!r} is not a plain SGLang request's rid")
    return int(match["group"]), int(match["index"])


def make_prompts(tokenizer, count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        text = TEMPLATES[i % len(TEMPLATES)].format(a=rng.randint(2, 99), b=rng.randint(2, 20), c=rng.randint(100, 999))
        out.append(tokenizer.encode_chat([{"role": "user", "content": text}]))
    return out


def workload_shape(args):
    """The preset's lengths scaled to ``--max-tokens``, with the run's group size."""
    return dataclasses.replace(PRESETS[args.workload].scaled(args.max_tokens), group_size=args.group_size)


def workload_seeds(args) -> list[int]:
    """One workload seed per repeat with ``--vary-trace`` (repeat r runs seed + r), else the one seed."""
    return [args.seed + r for r in range(args.repeats)] if args.vary_trace else [args.seed]


@dataclasses.dataclass
class Workload:
    """What every mode of one benchmark runs: the measured trace and a separate warm-up trace."""

    prompts: list[list[int]]
    trace: list[TraceSample]
    warm_prompts: list[list[int]]
    warm_trace: list[TraceSample]
    eos: int
    replay: dict | None = None  # recorded text by (group, sample index), ``--replay``
    warm_replay: dict | None = None  # the warm-up's: recorded text too (``replay_for_warmup``)


def prompt_tokenizer(args, recording: dict | None = None):
    """The tokenizer that makes the workload's prompts: the model's, or with ``--replay`` the recorded
    model's, since a replay's prompts are the recording's (then mapped into a compact model's
    vocabulary, ``compact_vocabulary``). ``recording``: the ``--replay`` file already read, if it was."""
    from seer_sglang.frontend.tokenizer import PromptTokenizer

    if recording is None and getattr(args, "replay", None):
        recording = json.loads(resolve(args.replay).read_text())
    return PromptTokenizer(resolve_model_path(recording["config"]["model"] if recording else args.model))


def build_workload(args, tokenizer, spec) -> Workload:
    def traced(prompts: list[list[int]], count: int, seed: int) -> list[TraceSample]:
        return [TraceSample(s.group_id, s.sample_index, len(prompts[s.group_id]), s.output_len)
                for s in generate(spec, count, seed)]

    prompts = make_prompts(tokenizer, args.prompts, args.seed)
    warm_seed = args.seed + 1000  # apart from every measured workload (--vary-trace runs seed + r)
    warm_prompts = make_prompts(tokenizer, args.warmup_prompts, warm_seed)
    return Workload(prompts, traced(prompts, args.prompts, args.seed), warm_prompts,
                    traced(warm_prompts, args.warmup_prompts, warm_seed) if args.warmup_prompts else [],
                    tokenizer.tok.eos_token_id)


def compact_vocabulary(workloads: list[Workload], vocab_size: int, keep: set[int]) -> dict[int, int] | None:
    """Map the workloads' tokens one to one into ``[0, vocab_size)`` for a model with a smaller
    vocabulary than its tokenizer (``tiny-smollm2-4k``), in place; None when every token fits already.

    Drafters and the verify step compare tokens only for equality, so a one-to-one map keeps every
    draft's acceptance; ``keep`` (EOS and the other special tokens) keep their ids. The prompts,
    warm-up prompts and recorded outputs of all workloads share one map: it is the same text.
    """
    tokens = set()
    for work in workloads:
        for ids in [*work.prompts, *work.warm_prompts, *(work.replay or {}).values(),
                    *(work.warm_replay or {}).values()]:
            tokens.update(ids)
    if not tokens or max(tokens) < vocab_size:
        return None
    fixed = {t for t in keep if t < vocab_size}
    free = (i for i in range(vocab_size) if i not in fixed)
    mapping = {t: t for t in fixed}
    movable = sorted(tokens - fixed)
    if len(movable) > vocab_size - len(fixed):
        raise SystemExit(f"the workload has {len(tokens)} distinct tokens: more than the model's vocabulary "
                         f"of {vocab_size}")
    mapping.update(zip(movable, free))
    for work in workloads:
        work.prompts = [[mapping[t] for t in ids] for ids in work.prompts]
        work.warm_prompts = [[mapping[t] for t in ids] for ids in work.warm_prompts]
        if work.replay is not None:
            work.replay = {key: [mapping[t] for t in ids] for key, ids in work.replay.items()}
        if work.warm_replay is not None:
            work.warm_replay = {key: [mapping[t] for t in ids] for key, ids in work.warm_replay.items()}
    return mapping


def replay_for_warmup(warm_trace: list[TraceSample], replay: dict) -> dict:
    """Recorded text for the warm-up rollout: warm-up group g replays the outputs of the recording's
    group g (cyclically), sibling for sibling. Without it the warm-up's samples are the small model's
    own text, which no draft matches, and an instance's draft budget, which learns acceptance from
    every step it runs, begins the measured rollouts believing that drafts are never accepted. Each
    warm-up group is its own group to the drafters, so nothing of it reaches the measured groups'."""
    groups = sorted({g for g, _ in replay})
    sizes = {g: 1 + max(i for h, i in replay if h == g) for g in groups}
    out = {}
    for s in warm_trace:
        g = groups[s.group_id % len(groups)]
        out[(s.group_id, s.sample_index)] = replay[(g, s.sample_index % sizes[g])]
    return out


KEYS = ("workload", "prompts", "group_size", "max_tokens")  # what a replay must match, besides the seed


def prompts_digest(prompts: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(prompts).encode()).hexdigest()[:16]


def load_recording(data: dict, args, seed: int, prompts: list[list[int]]) -> dict[tuple[int, int], list[int]]:
    """The outputs a recording (``data``, the file's JSON) holds for the workload of ``seed``, by (group,
    sample index), after checking that it belongs to ``args``' workload and was written after the same
    prompt tokens (the same tokenizer)."""
    wrong = {k: (data["config"][k], getattr(args, k)) for k in KEYS if data["config"][k] != getattr(args, k)}
    workload = next((w for w in data["workloads"] if w["seed"] == seed), None)
    if workload is None:
        wrong["seed"] = ([w["seed"] for w in data["workloads"]], seed)
    elif workload["prompts_sha"] != prompts_digest(prompts):
        wrong["prompts"] = ("other prompt tokens", "these")
    if wrong:
        raise SystemExit("the recording belongs to another workload: " +
                         ", ".join(f"{k} {rec!r} (here {mine!r})" for k, (rec, mine) in wrong.items()))
    return {(g, i): out for g, group in enumerate(workload["groups"]) for i, out in enumerate(group["outputs"])}
