"""GRPO-style rollout workloads: P prompts x G samples with hidden target lengths.

Lengths are long-tailed across groups (log-normal group means) and strongly correlated inside a
group (a small log-normal spread around the group mean), clipped to ``max_tokens``. Presets follow
the Seer paper's workloads (mean / max output tokens), and ``scaled`` shrinks one to a testbed.
Traces are JSONL, one sample per line: group_id, sample_index, prompt_len, output_len.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

from ..core.slo import SLO


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    group_size: int
    max_tokens: int
    mean_tokens: float
    group_sigma: float = 1.0  # spread of group means (log scale): the long tail across groups
    within_sigma: float = 0.25  # spread inside a group (log scale): siblings are alike
    prompt_len: tuple[int, int] = (200, 1200)
    # Each instance's KV holds this share of its part of the working set. Seer ran with a working
    # set of about twice the KV: requests queue, dispatch order matters, SGLang retracts.
    kv_share: float = 0.5

    def scaled(self, max_tokens: int, prompt_len: tuple[int, int] | None = None) -> "WorkloadSpec":
        """Same shape (mean/max ratio, spreads), fewer tokens: for small testbeds."""
        ratio = max_tokens / self.max_tokens
        return WorkloadSpec(self.name, self.group_size, max_tokens, self.mean_tokens * ratio, self.group_sigma,
                            self.within_sigma, prompt_len or self.prompt_len, self.kv_share)


# Seer v3, Table: G and max / mean output tokens.
PRESETS = {
    "moonlight": WorkloadSpec("moonlight", 8, 65_536, 22_386),
    "qwen2vl": WorkloadSpec("qwen2vl", 16, 40_960, 7_615),
    "kimik2": WorkloadSpec("kimik2", 8, 98_304, 38_959),
}


@dataclass(frozen=True)
class TraceSample:
    group_id: int
    sample_index: int
    prompt_len: int
    output_len: int


def sim_group_id(group_id: int) -> str:
    """The simulated group of trace group ``group_id``: the id its requests carry to the router."""
    return f"g{group_id}"


def trace_group(name: str) -> int:
    """``sim_group_id``'s trace group back from the simulated group's id."""
    if not (name.startswith("g") and name[1:].isdigit()):
        raise ValueError(f"{name!r} is not a simulated group's id")
    return int(name[1:])


def _mu_for_mean(spec: WorkloadSpec) -> float:
    """Log-mean of group means so that the clipped overall mean lands near ``mean_tokens``."""
    s2 = spec.group_sigma ** 2 + spec.within_sigma ** 2
    mu = math.log(spec.mean_tokens) - s2 / 2
    rng = random.Random(12345)
    for _ in range(30):  # correct for clipping at max_tokens by a few fixed-point steps
        draws = [min(spec.max_tokens, math.exp(rng.gauss(mu, math.sqrt(s2)))) for _ in range(4000)]
        mu += math.log(spec.mean_tokens / (sum(draws) / len(draws)))
    return mu


def generate(spec: WorkloadSpec, prompts: int, seed: int = 0) -> list[TraceSample]:
    rng = random.Random(seed)
    mu = _mu_for_mean(spec)
    out = []
    for g in range(prompts):
        group_mean = rng.gauss(mu, spec.group_sigma)
        prompt_len = rng.randint(*spec.prompt_len)
        for i in range(spec.group_size):
            length = math.exp(group_mean + rng.gauss(0.0, spec.within_sigma))
            out.append(TraceSample(g, i, prompt_len, max(1, min(spec.max_tokens, int(length)))))
    return out


@dataclass(frozen=True)
class SLOArrival:
    """An interactive request with an SLO that arrives while the rollout runs."""

    arrival_s: float
    prompt_len: int
    output_len: int
    slo: SLO
    slo_class: str
    phase: int = 0


def slo_arrivals(classes: Mapping[str, SLO], rates: list[float], phase_s: float, start_s: float, output_len: int,
                 prompt_len: tuple[int, int] = (8, 32), seed: int = 0) -> list[SLOArrival]:
    """Poisson arrivals whose rate rises phase by phase (``rates`` per second, ``phase_s`` each, from
    ``start_s``), the classes taking turns, as ``benchmarks.slo`` sends them."""
    rng = random.Random(seed)
    names = list(classes)
    out: list[SLOArrival] = []
    t = start_s
    for phase, rate in enumerate(rates):
        end = start_s + (phase + 1) * phase_s
        while rate > 0:
            t += rng.expovariate(rate)
            if t >= end:
                t = end
                break
            name = names[len(out) % len(names)]
            out.append(SLOArrival(t, rng.randint(*prompt_len), output_len, classes[name], name, phase))
        t = max(t, end)  # a quiet phase (rate 0) sends nothing
    return out


def working_set(samples: list[TraceSample]) -> int:
    """KV tokens of a whole rollout at once: each group's prompt once (siblings share its pages in
    SGLang's radix cache) and every sample's full output."""
    prompts = {s.group_id: s.prompt_len for s in samples}
    return sum(prompts.values()) + sum(s.output_len for s in samples)


def kv_cap(samples: list[TraceSample], instances: int, share: float) -> int:
    """Per-instance KV tokens that hold ``share`` of the working set, spread evenly over the instances."""
    return max(1, int(share * working_set(samples) / instances))


def save_trace(samples: list[TraceSample], path: str | Path) -> None:
    Path(path).write_text("".join(json.dumps(asdict(s)) + "\n" for s in samples))


def load_trace(path: str | Path) -> list[TraceSample]:
    return [TraceSample(**json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]


def groups_of(samples: list[TraceSample]) -> dict[int, list[TraceSample]]:
    groups: dict[int, list[TraceSample]] = {}
    for s in samples:
        groups.setdefault(s.group_id, []).append(s)
    return {g: sorted(v, key=lambda s: s.sample_index) for g, v in sorted(groups.items())}
