"""``--kv-pool auto``: price this model's moves with the cost model and decide the default pool.

The pool only pays where loading a context is much cheaper than recomputing it. That depends on
the model: a pool page costs about the same to read whatever it holds (a file per page), while a
recompute costs the model's FLOPs per token. A tiny model recomputes a page faster than a file
opens; a real one takes milliseconds per token. The inputs come from the model folder
(``config.json``: the KV bytes per token; the weight files: the parameters), the device's prefill
rate, or the emulated step model's prefill when ``--emulate`` is on, and the pool's measured
per-page cost (``KVPoolConfig``); :func:`~seer_sglang.core.migration.choose_pool` decides.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..config import KV_POOL, EmulationConfig
from ..core.migration import MigrationCost, PoolChoice, choose_pool
from .sglang_args import flag_value

DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1, "fp8": 1}


@dataclass(frozen=True)
class ModelGeometry:
    params: float  # parameters in the weight files
    kv_bytes_per_token: int  # KV cache bytes of one token, all layers
    context_tokens: int  # the longest context SGLang serves for it


def model_config(model_path: str) -> dict:
    """The model folder's ``config.json``, a multimodal model's text part merged in."""
    cfg = json.loads((Path(model_path) / "config.json").read_text())
    return {**cfg.get("text_config", {}), **cfg}


def is_mla(model_path: str) -> bool:
    """Whether the model caches one compressed latent per layer (MLA), as SGLang's storage keys it."""
    try:
        return bool(model_config(model_path).get("kv_lora_rank"))
    except (OSError, ValueError):
        return False


def model_geometry(model_path: str, sglang_args: list[str]) -> ModelGeometry:
    """What the cost model needs of a local model folder (an MLA model stores one latent per layer)."""
    folder = Path(model_path)
    cfg = model_config(model_path)
    stored = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    dtype = flag_value(sglang_args, "--kv-cache-dtype") or flag_value(sglang_args, "--dtype") or "auto"
    kv_bytes = DTYPE_BYTES.get(stored if dtype == "auto" else dtype, 2)
    layers = int(cfg["num_hidden_layers"])
    if cfg.get("kv_lora_rank"):
        per_layer = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim", 0))
    else:
        heads = int(cfg["num_attention_heads"])
        head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
        per_layer = 2 * int(cfg.get("num_key_value_heads") or heads) * head_dim
    weights = sum(f.stat().st_size for f in folder.glob("*.safetensors")) or sum(
        f.stat().st_size for f in folder.glob("*.bin"))
    context = int(flag_value(sglang_args, "--context-length") or cfg.get("max_position_embeddings") or 4096)
    return ModelGeometry(params=weights / DTYPE_BYTES.get(stored, 2), kv_bytes_per_token=layers * per_layer * kv_bytes,
                         context_tokens=context)


def auto_pool(model_path: str, sglang_args: list[str], cpu: bool, instances: int,
              emulation: EmulationConfig | None = None,
              page_sizes: tuple[int, ...] = KV_POOL.auto_page_sizes) -> PoolChoice:
    """File pool or none, and the page size, for this model on this device.

    A sample is taken to move half way through the longest context; with one instance nothing
    moves, so the pool never pays. Under ``--emulate`` a recompute costs the emulated prefill.
    """
    geometry = model_geometry(model_path, sglang_args)
    if emulation is not None and emulation.profile:
        from .emulation import emulated_model

        prefill = emulated_model(emulation).prefill_per_token_s
    else:
        prefill = 2 * geometry.params / (KV_POOL.cpu_flops if cpu else KV_POOL.gpu_flops)
    cost = MigrationCost(prefill_s_per_token=prefill,
                         load_s_per_token=geometry.kv_bytes_per_token / KV_POOL.file_bytes_per_s,
                         page_io_s=KV_POOL.file_page_io_s)
    moves = KV_POOL.moves_per_sample if instances > 1 else 0.0
    return choose_pool(cost, geometry.context_tokens // 2, moves, page_sizes)
