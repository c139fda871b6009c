"""Step-time model of one instance: t(batch, kv_tokens) per decode step, and prefill per token."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..config import KV_POOL
from ..core.migration import MigrationCost


@dataclass(frozen=True)
class StepModel:
    """decode step = base + per_seq * batch + per_kv_token * kv_tokens; prefill = per_token * tokens."""

    name: str
    decode_base_s: float
    decode_per_seq_s: float
    decode_per_kv_token_s: float
    prefill_per_token_s: float
    capacity_tokens: int  # KV tokens one instance holds
    max_running: int = 1024
    source: str = ""
    pool_load_s_per_token: float = 0.0  # global KV pool read, per token (0 = unknown: no pool modelled)
    request_overhead_s: float = 0.0  # per chunk, outside model steps: HTTP, tokenizing, scheduling

    def decode_step(self, batch: int, kv_tokens: int) -> float:
        return self.decode_base_s + self.decode_per_seq_s * batch + self.decode_per_kv_token_s * kv_tokens

    def decode_steps(self, steps: int, batch: int, kv_tokens: int) -> float:
        """Time of ``steps`` consecutive steps of a fixed batch whose KV grows by ``batch`` per step."""
        first = self.decode_step(batch, kv_tokens)
        return steps * first + self.decode_per_kv_token_s * batch * steps * (steps - 1) / 2

    def migration_cost(self, page_size: int = KV_POOL.page_size) -> MigrationCost:
        """The router's move cost on this model. Without a pool no sample holds pooled tokens, so
        the same object prices every move as a re-prefill."""
        return MigrationCost(prefill_s_per_token=self.prefill_per_token_s, load_s_per_token=self.pool_load_s_per_token,
                             load_fixed_s=self.decode_base_s, decode_s_per_token=self.decode_step(1, 0),
                             page_size=page_size)

    def prefill(self, tokens: int) -> float:
        return self.prefill_per_token_s * tokens

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> "StepModel":
        return cls(**json.loads(Path(path).read_text()))


# A 70B-class dense model (Llama-2/3-70B shape: 80 layers, 8 KV heads x 128, bf16) on one 8xH100
# TP-8 instance, from public figures, not measured here:
#  - weights 140 GB over 8 GPUs read once per step at ~3.35 TB/s -> ~5.2 ms, plus kernel launch /
#    all-reduce overheads seen in public vLLM/SGLang decode traces: base ~ 12 ms;
#  - KV read: 320 KB per token over 8 x 3.35 TB/s -> ~12 ns per KV token per step;
#  - per-sequence cost (sampling, scheduling, small GEMM growth): ~40 us;
#  - prefill: ~2 * 70e9 FLOP/token at ~50% of 8 x 989 TFLOP/s -> ~35 us per token;
#  - KV capacity: (8 x 80 GB - 140 GB) x 0.9 / 320 KB ~ 1.4M tokens;
#  - global KV pool read (Mooncake over RDMA, ~20 GB/s into one instance): 320 KB / 20 GB/s ~ 16 us per token.
H100_70B = StepModel(
    name="h100x8-70b-public", decode_base_s=0.012, decode_per_seq_s=40e-6, decode_per_kv_token_s=12e-9,
    prefill_per_token_s=35e-6, capacity_tokens=1_400_000, max_running=1024, pool_load_s_per_token=16e-6,
    source="public H100 figures for a 70B-class model (derivation in seer_sglang/sim/step_model.py)",
)
