"""LoRA through divided rollout, on the tiny model with two local random adapters: a sample keeps its
adapter in every chunk on every instance, so its greedy tokens are plain SGLang's with that adapter
(and not the base model's); adapters load and unload on every instance; and swapping an adapter's
weights in the middle of a rollout regenerates the samples that had tokens from the old ones."""

from __future__ import annotations

import httpx
import pytest

from conftest import BackgroundRollout, chunked, generated_tokens, moved_rollout, seer_beside_plain, wait_until
from seer_sglang.models import prepare

CHUNK = 16
PAGE = 16  # the pool's page, in tokens
PROMPTS = [[7 + i, 300 + 11 * i, 41, 12, 990 - i, 5, 77, 1500 + i, 3, 64] for i in range(4)]


def _lora_args(adapters) -> list[str]:
    return ["--dtype", "float32", "--enable-lora", "--lora-backend", "torch_native", "--max-loras-per-batch", "2",
            "--max-lora-rank", "8", "--lora-target-modules", "all", "--lora-paths", f"a={adapters}/a"]


@pytest.fixture(scope="module")
def lora(tiny_model, tmp_path_factory):
    """(seer with 2 instances, a plain SGLang instance, the adapters' folder), adapter ``a`` loaded at launch."""
    adapters = prepare("tiny-lora")
    logs = tmp_path_factory.mktemp("lora")
    # --kv-pool file: a moved sample loads its adapter's pages from the pool; --draft-budget full: every
    # decode step with drafts verifies them all (in the bucketed layout LoRA takes), so each test below
    # runs the adapter through speculative verify steps
    with seer_beside_plain(tiny_model, logs, _lora_args(adapters),
                           ("--kv-pool", "file", "--draft-budget", "full")) as (seer, plain):
        _scheduler(seer.url)
        yield seer.url, plain.url, adapters


def _scheduler(url: str, **settings) -> None:
    chunked(url, CHUNK, **settings)


def _plain(url: str, prompt: list[int], adapter: str | None, tokens: int = 48) -> list[int]:
    r = httpx.post(f"{url}/generate", json={"input_ids": prompt, "lora_path": adapter, "sampling_params": {
        "max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["output_ids"]


def test_adapter_tokens_over_chunks_and_instances_equal_plain_sglang_with_it(lora):
    seer_url, plain_url, _ = lora
    want = [_plain(plain_url, p, "a") for p in PROMPTS]
    base = [_plain(plain_url, p, None) for p in PROMPTS]
    assert all(w != b for w, b in zip(want, base))  # the adapter changes the greedy tokens
    samples = moved_rollout(seer_url, {"prompts": [{"input_ids": p} for p in PROMPTS], "n": 2, "max_tokens": 48,
                                       "temperature": 0, "ignore_eos": True, "lora_path": "a"}, CHUNK)
    for s in samples:
        assert len(s["chunks"]) == 3 and s["output_ids"] == want[s["prompt_index"]], \
            (s["prompt_index"], [(c["instance"], c["tokens"]) for c in s["chunks"]], s["output_ids"], s["error"])
    # SGLang's own forms: lora_path on /generate, <model>:<adapter> on the OpenAI routes; none = the base
    got = httpx.post(f"{seer_url}/generate", json={"input_ids": PROMPTS, "lora_path": ["a", None, "a", None],
                                                   "sampling_params": {"max_new_tokens": 48, "temperature": 0,
                                                                       "ignore_eos": True}}, timeout=300).json()
    assert [g["output_ids"] for g in got] == [want[0], base[1], want[2], base[3]], got
    r = httpx.post(f"{seer_url}/v1/completions", json={"prompt": PROMPTS[1], "model": "default:a", "max_tokens": 48,
                                                        "temperature": 0, "ignore_eos": True}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == httpx.post(f"{plain_url}/v1/completions", json={
        "prompt": PROMPTS[1], "model": "default:a", "max_tokens": 48, "temperature": 0, "ignore_eos": True},
        timeout=300).json()["choices"][0]["text"]
    r = httpx.post(f"{seer_url}/generate", json={"input_ids": PROMPTS[0], "lora_path": "nope",
                                                 "sampling_params": {"max_new_tokens": 4}}, timeout=60)
    assert 400 <= r.status_code < 500, r.text


def test_siblings_under_an_adapter_draft_from_each_other(lora):
    """Speculation with LoRA: a sibling that joins its group late drafts the lead's tokens (greedy, the
    same adapter: the same tokens), verified under the adapter in one width per step; its tokens are
    plain SGLang's with the adapter."""
    import asyncio
    import json

    seer_url, plain_url, _ = lora
    prompt, new_tokens = [44, 9, 310, 27, 5, 1201], 160
    want = _plain(plain_url, prompt, "a", new_tokens)
    body = {"input_ids": prompt, "lora_path": "a",
            "sampling_params": {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}}

    async def send():
        async with httpx.AsyncClient(base_url=seer_url, timeout=300) as c:
            async with c.stream("POST", "/generate", json={**body, "stream": True}) as first:
                lead, late = None, None
                async for line in first.aiter_lines():
                    if not line.startswith("data:") or line.endswith("[DONE]"):
                        continue
                    lead = json.loads(line[5:])
                    if late is None and len(lead["output_ids"]) >= new_tokens * 2 // 3:
                        late = asyncio.create_task(c.post("/generate", json=body))
            return lead, None if late is None else (await late).json()

    lead, late = asyncio.run(send())
    assert late is not None, "the lead finished before it was two thirds through"
    assert lead["output_ids"] == late["output_ids"] == want
    assert late["meta_info"]["group_id"] == lead["meta_info"]["group_id"]
    assert late["meta_info"]["spec_verify_ct"] > 0 and late["meta_info"]["spec_accept_token_num"] > 0, late["meta_info"]


def test_a_moved_adapter_sample_loads_its_context_from_the_pool(lora):
    """The pool keys an adapter's pages by a digest of its weights, not by the id each instance draws
    when it loads the adapter (loaded at run time, each instance draws its own): a sample moved to the
    other instance loads its context from the pool (each prompt here is its sample's own, so no other
    sample's pages can serve it), and its tokens are still plain SGLang's with the adapter."""
    seer_url, plain_url, adapters = lora
    body = {"lora_name": "pooled", "lora_path": str(adapters / "b")}
    for url in (seer_url, plain_url):
        assert httpx.post(f"{url}/load_lora_adapter", json=body, timeout=120).status_code == 200
    try:
        # 80 tokens: an instance looks in the pool for a context of 64 tokens and more (KVPoolConfig)
        prompts = [[19 + i, 400 + 13 * i] + [(37 * i + 11 * k) % 1500 + 3 for k in range(78)] for i in range(8)]
        want = [_plain(plain_url, p, "pooled") for p in prompts]
        samples = moved_rollout(seer_url, {"prompts": [{"input_ids": p} for p in prompts], "n": 1,
                                           "max_tokens": 48, "temperature": 0, "ignore_eos": True,
                                           "lora_path": "pooled"}, CHUNK)
    finally:
        for url in (seer_url, plain_url):
            httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": "pooled"}, timeout=120)
    moves = []
    for s in samples:
        assert s["output_ids"] == want[s["prompt_index"]], s["prompt_index"]
        moves += [c for before, c in zip(s["chunks"], s["chunks"][1:]) if c["instance"] != before["instance"]]
    assert moves and all(c["kv"]["pool"] >= PAGE for c in moves), [c["kv"] for c in moves]


def test_adapters_load_and_unload_on_every_instance(lora):
    seer_url, plain_url, adapters = lora
    body = {"lora_name": "b", "lora_path": str(adapters / "b")}
    r = httpx.post(f"{seer_url}/load_lora_adapter", json=body, timeout=120)
    assert r.status_code == 200 and len(r.json()["instances"]) == 2, r.text
    assert httpx.post(f"{plain_url}/load_lora_adapter", json=body, timeout=120).status_code == 200
    try:
        want = _plain(plain_url, PROMPTS[2], "b")
        got = httpx.post(f"{seer_url}/v1/rollout", json={"prompts": [{"input_ids": PROMPTS[2]}], "n": 4,
                                                         "max_tokens": 48, "temperature": 0, "ignore_eos": True,
                                                         "lora_path": "b"}, timeout=600).json()["samples"]
        assert all(s["output_ids"] == want for s in got)
    finally:
        assert httpx.post(f"{seer_url}/unload_lora_adapter", json={"lora_name": "b"}, timeout=120).status_code == 200
        httpx.post(f"{plain_url}/unload_lora_adapter", json={"lora_name": "b"}, timeout=120)
    # an adapter unloaded by name: SGLang 0.5.23 loads it again for a request that names it, and so do
    # seer's instances
    body = {"input_ids": PROMPTS[2], "lora_path": "b", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    plain = httpx.post(f"{plain_url}/generate", json=body, timeout=60)
    r = httpx.post(f"{seer_url}/generate", json=body, timeout=60)
    assert r.status_code == plain.status_code == 200 and r.json()["output_ids"] == plain.json()["output_ids"]
    for url in (seer_url, plain_url):  # one of seer's instances loaded it again: unloading leaves none
        assert httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": "b"}, timeout=120).status_code == 200
    r = httpx.post(f"{seer_url}/unload_lora_adapter", json={"lora_name": "b"}, timeout=120)
    assert r.status_code == 200 and all(i.get("absent") for i in r.json()["instances"]), r.text
    r = httpx.post(f"{seer_url}/load_lora_adapter", json={"lora_name": "x:y", "lora_path": "/tmp"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "lora_name"


def test_an_adapter_loaded_from_tensors_reaches_every_instance(lora):
    """A trainer that holds its adapter in memory loads it with SGLang's tensors form: every instance
    takes it, and its tokens over chunks and instances are plain SGLang's with the same tensors."""
    import json

    import torch
    from safetensors.torch import load_file
    from sglang.srt.utils import MultiprocessingSerializer

    seer_url, plain_url, adapters = lora
    tensors = load_file(str(adapters / "b" / "adapter_model.safetensors"))
    config = json.loads((adapters / "b" / "adapter_config.json").read_text())

    def body(strategy: str) -> dict:
        # fresh storages for each receiver set: a shared-memory file is unlinked once its receivers let go
        torch.multiprocessing.set_sharing_strategy(strategy)
        fresh = {k: v.clone() for k, v in tensors.items()}
        kept.append(fresh)  # alive until the loads return
        return {"lora_name": "from-tensors", "config_dict": config,
                "serialized_named_tensors": [MultiprocessingSerializer.serialize(fresh, output_str=True)]}

    kept: list[dict] = []

    # By file descriptor (torch's default), which no instance can open (its scheduler would die of it):
    # refused by name, and every instance serves on.
    r = httpx.post(f"{seer_url}/load_lora_adapter_from_tensors", json=body("file_descriptor"), timeout=60)
    assert r.status_code == 400 and "file_system" in r.json()["error"]["message"], r.text
    assert httpx.get(f"{seer_url}/health", timeout=30).json()["healthy_instances"] == 2
    r = httpx.post(f"{seer_url}/load_lora_adapter_from_tensors", json=body("file_system"), timeout=120)
    assert r.status_code == 200 and len(r.json()["instances"]) == 2, r.text
    assert httpx.post(f"{plain_url}/load_lora_adapter_from_tensors", json=body("file_system"),
                      timeout=120).status_code == 200
    try:
        want = [_plain(plain_url, p, "from-tensors") for p in PROMPTS]
        assert want[0] != _plain(plain_url, PROMPTS[0], None)
        samples = moved_rollout(seer_url, {"prompts": [{"input_ids": p} for p in PROMPTS], "n": 2,
                                           "max_tokens": 48, "temperature": 0, "ignore_eos": True,
                                           "lora_path": "from-tensors"}, CHUNK)
        assert all(s["output_ids"] == want[s["prompt_index"]] for s in samples)
    finally:
        for url in (seer_url, plain_url):
            httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": "from-tensors"}, timeout=120)
    bad = {**body("file_system"), "serialized_named_tensors": ["bm90IGEgcGlja2xl"]}
    r = httpx.post(f"{seer_url}/load_lora_adapter_from_tensors", json=bad, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "serialized_named_tensors", r.text
    assert httpx.get(f"{seer_url}/health", timeout=30).json()["healthy_instances"] == 2


def test_swapping_an_adapters_weights_mid_rollout_regenerates_its_samples(lora):
    """As a trainer updates a LoRA policy: pause, unload the adapter, load its new weights under the same
    name, continue. Every sample's tokens then come from one version of the adapter: those that had
    tokens from the old one are generated again, on the new one."""
    seer_url, plain_url, adapters = lora
    old = [_plain(plain_url, p, "a", 160) for p in PROMPTS]
    load_b = {"lora_name": "a-new", "lora_path": str(adapters / "b")}
    assert httpx.post(f"{plain_url}/load_lora_adapter", json=load_b, timeout=120).status_code == 200
    new = [_plain(plain_url, p, "a-new", 160) for p in PROMPTS]
    _scheduler(seer_url, kv_headroom=0.001)
    try:
        run = BackgroundRollout(seer_url, {"prompts": [{"input_ids": p} for p in PROMPTS], "n": 2, "max_tokens": 160,
                                           "temperature": 0, "ignore_eos": True, "lora_path": "a"})
        start = generated_tokens(seer_url)
        wait_until(lambda: generated_tokens(seer_url) - start >= 3 * CHUNK, 300, 0.05, "a few chunks done")
        assert httpx.post(f"{seer_url}/pause_generation", json={}, timeout=60).status_code == 200
        assert httpx.post(f"{seer_url}/unload_lora_adapter", json={"lora_name": "a"}, timeout=120).status_code == 200
        r = httpx.post(f"{seer_url}/load_lora_adapter", json={"lora_name": "a", "lora_path": str(adapters / "b")},
                       timeout=120)
        assert r.status_code == 200, r.text
        assert httpx.post(f"{seer_url}/continue_generation", json={}, timeout=60).status_code == 200
        r = run.wait(600)
    finally:
        _scheduler(seer_url)
        httpx.post(f"{plain_url}/unload_lora_adapter", json={"lora_name": "a-new"}, timeout=120)
    assert r.status_code == 200, r.text
    samples = r.json()["samples"]
    def diverge(a, b):
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    bad = [(s["prompt_index"], s["regenerations"], [(c["instance"], c["tokens"]) for c in s["chunks"]],
            diverge(s["output_ids"], old[s["prompt_index"]]), diverge(s["output_ids"], new[s["prompt_index"]]))
           for s in samples if s["output_ids"] not in (old[s["prompt_index"]], new[s["prompt_index"]])]
    assert not bad, bad
    regenerated = [s for s in samples if s["regenerations"]]
    assert regenerated and all(s["output_ids"] == new[s["prompt_index"]] for s in regenerated)

