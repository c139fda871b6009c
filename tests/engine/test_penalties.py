"""Penalties, min_tokens and logit_bias through chunks of 16: the tokens of plain SGLang run unchunked.

SGLang counts a request's output for its penalizers before each step without overlap (the speculative
path on CPU, which the shared seer server runs). Under the overlap scheduler its count trails, by a
step or not depending on how prefill and decode batches follow each other, so plain SGLang is not
consistent with itself there and only the scheduler without overlap is compared (with plain SGLang
under ``--disable-overlap-schedule``, without the plugin).
"""

from __future__ import annotations

import random

import httpx
import pytest

from conftest import start_healthy
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, has_cuda,
                                            stop_instances)

CHUNK = 16
PENALTIES = {"frequency_penalty": 0.8, "repetition_penalty": 1.3, "presence_penalty": 0.4}


def _prompts(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 2048) for _ in range(rng.randint(4, 24))] for _ in range(n)]


@pytest.fixture(scope="module")
def no_overlap_url(tiny_model, tmp_path_factory):
    """Plain SGLang (no plugin) with the scheduler the speculative seer server runs on CPU."""
    logs = tmp_path_factory.mktemp("plain_no_overlap")
    inst = start_healthy(InstanceSpec(
        model_path=tiny_model, port=free_port(), cpu=not has_cuda(), with_plugin=False,
        sglang_args=["--dtype", "float32", "--disable-overlap-schedule"], log_path=logs / "plain.log",
        cpu_threads=cpu_threads_per_instance(3)))
    yield inst.url
    stop_instances([inst])


@pytest.fixture
def chunked(seer_url):
    before = httpx.get(f"{seer_url}/scheduler").json()
    r = httpx.post(f"{seer_url}/scheduler", json={"name": "context", "chunk_size": CHUNK, "align_to_pages": False},
                   timeout=30)
    assert r.status_code == 200, r.text
    yield seer_url
    httpx.post(f"{seer_url}/scheduler", json=before, timeout=30).raise_for_status()


def _plain(url: str, prompts: list[list[int]], params: dict) -> list[dict]:
    with httpx.Client(timeout=600) as http:
        return [http.post(f"{url}/generate", json={
            "input_ids": p, "return_logprob": True, "logprob_start_len": -1, "sampling_params": params}).json()
            for p in prompts]


def _rollout(url: str, prompts: list[list[int]], **fields) -> list[dict]:
    r = httpx.post(f"{url}/v1/rollout", json={"prompts": [{"input_ids": p} for p in prompts], "n": 2,
                                              "temperature": 0, "logprobs": True, **fields}, timeout=600)
    assert r.status_code == 200, r.text
    return sorted(r.json()["samples"], key=lambda s: (s["prompt_index"], s["index"]))


def _check_equal(samples: list[dict], ref: list[dict], chunks: int) -> None:
    """Tokens identical. Logprobs only within 1e-2: with penalties, plain SGLang itself returns
    logprobs that differ by up to ~2e-4 between two identical requests (float32, CPU), and seer's
    speculative path drifts below plain SGLang's by up to ~6e-3 late in a sample, chunked or not."""
    for s in samples:
        want = ref[s["prompt_index"]]
        assert s["output_ids"] == want["output_ids"], (s["prompt_index"], s["index"])
        assert len(s["chunks"]) == chunks
        logprobs = [lp for lp, *_ in want["meta_info"]["output_token_logprobs"]]
        off = [(i, round(a - b, 5)) for i, (a, b) in enumerate(zip(s["logprobs"], logprobs)) if abs(a - b) >= 1e-2]
        assert not off, off


def _penalties_apply(url: str, prompts: list[list[int]], penalized: list[dict], max_tokens: int) -> None:
    """The references differ from greedy decoding without penalties, so a dropped penalty shows."""
    greedy = _plain(url, prompts, {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    assert all(g["output_ids"] != p["output_ids"] for g, p in zip(greedy, penalized))


def test_penalties_span_chunks_on_the_speculative_path(chunked, no_overlap_url):
    prompts = _prompts(3, seed=21)
    params = {"max_new_tokens": 56, "temperature": 0, "ignore_eos": True, **PENALTIES}
    ref = _plain(no_overlap_url, prompts, params)
    _penalties_apply(no_overlap_url, prompts, ref, 56)
    _check_equal(_rollout(chunked, prompts, max_tokens=56, ignore_eos=True, **PENALTIES), ref, chunks=4)


def test_min_tokens_and_logit_bias_span_chunks(chunked, no_overlap_url, tiny_model):
    """A bias of +100 on EOS ends a sample at its first allowed token; min_tokens 37 holds EOS back
    across two chunk boundaries, so every sample ends with EOS as its 38th token."""
    from transformers import AutoTokenizer

    eos = AutoTokenizer.from_pretrained(tiny_model).eos_token_id
    prompts = _prompts(3, seed=22)
    bias = {str(eos): 100.0}
    ref = _plain(no_overlap_url, prompts, {"max_new_tokens": 56, "temperature": 0, "min_new_tokens": 37,
                                           "logit_bias": bias})
    assert all(len(r["output_ids"]) == 38 and r["output_ids"][-1] == eos for r in ref)
    _check_equal(_rollout(chunked, prompts, max_tokens=56, min_tokens=37, logit_bias=bias), ref, chunks=3)
