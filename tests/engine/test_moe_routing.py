"""Routing replay across chunks on a MoE model (the local random Qwen3-MoE): a sample's expert routings,
asked as slime's and veRL's MoE recipes ask them (``return_routed_experts``), equal plain SGLang's
answer to the unchunked request, position by position, when the sample ran in chunks of 16 on two
instances."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from conftest import chunked, moved_rollout, seer_beside_plain
from seer_sglang.models import prepare

CHUNK = 16
LAYERS, TOP_K = 2, 2  # the tiny MoE's
ROUTING_ARGS = ("--dtype", "float32", "--enable-return-routed-experts")


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """(seer with 2 instances, a plain SGLang instance), both of the tiny MoE with routing capture."""
    model = str(prepare("tiny-moe"))
    logs = tmp_path_factory.mktemp("moe")
    with seer_beside_plain(model, logs, list(ROUTING_ARGS)) as (seer, plain):
        _scheduler(seer.url)
        yield seer.url, plain.url


def _scheduler(url: str, **settings) -> None:
    chunked(url, CHUNK, **settings)


def _rows(answer: dict) -> np.ndarray:
    raw = base64.b64decode(answer["meta_info"]["routed_experts"])
    return np.frombuffer(raw, dtype=np.int32).reshape(-1, LAYERS, TOP_K)


def _prompt(i: int) -> list[int]:
    return [7 + i, 300 + 11 * i, 41, 12, 990 - i, 5, 77, 1500 + i, 3, 64, 128 + i]


def test_routed_experts_over_chunks_and_instances_equal_the_unchunked_answer(moe):
    seer_url, plain_url = moe
    # 6 samples of 56 tokens: four chunks each, spread over both instances
    bodies = [{"input_ids": _prompt(i), "return_routed_experts": True, "routed_experts_start_len": start,
               "sampling_params": {"max_new_tokens": 56, "temperature": 0, "ignore_eos": True}}
              for i, start in enumerate((0, 0, 3, 5, 11, 0))]
    plain = [httpx.post(f"{plain_url}/generate", json=b, timeout=300).json() for b in bodies]
    with httpx.Client(timeout=300) as http:
        got = http.post(f"{seer_url}/generate", json={
            "input_ids": [b["input_ids"] for b in bodies], "return_routed_experts": True,
            "sampling_params": {"max_new_tokens": 56, "temperature": 0, "ignore_eos": True}}).json()
        # one request per start position, as SGLang takes one start for a whole request
        by_start = [http.post(f"{seer_url}/generate", json=b).json() for b in bodies]
    for want, seer in zip(plain[:2] + plain[5:], got[:2] + got[5:]):
        assert seer["output_ids"] == want["output_ids"]
        assert _rows(seer).shape == (len(_prompt(0)) + 56 - 1, LAYERS, TOP_K)
        assert np.array_equal(_rows(seer), _rows(want))
    for body, want, seer in zip(bodies, plain, by_start):
        assert seer["output_ids"] == want["output_ids"]
        rows = _rows(seer)
        assert rows.shape[0] == len(body["input_ids"]) + 56 - 1 - body["routed_experts_start_len"]
        assert np.array_equal(rows, _rows(want)), body["routed_experts_start_len"]
    # the routings are not all alike: a copy of one row would not pass the checks above by chance
    assert len({tuple(r.ravel()) for r in _rows(got[0])}) > 4


def test_a_rollout_returns_routings_for_samples_moved_between_instances(moe):
    seer_url, plain_url = moe
    prompts = [_prompt(i) for i in range(4)]
    samples = moved_rollout(seer_url, {"prompts": [{"input_ids": p} for p in prompts], "n": 2, "max_tokens": 48,
                                       "temperature": 0, "ignore_eos": True, "return_routed_experts": True}, CHUNK)
    plain = [httpx.post(f"{plain_url}/generate", json={
        "input_ids": p, "return_routed_experts": True,
        "sampling_params": {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True}}, timeout=300).json()
        for p in prompts]
    for s in samples:
        assert len(s["chunks"]) == 3
        want = plain[s["prompt_index"]]
        assert s["output_ids"] == want["output_ids"]
        got, expected = _rows({"meta_info": s}), _rows(want)
        assert got.shape == expected.shape, (got.shape, expected.shape)
        differ = [i for i in range(len(got)) if not np.array_equal(got[i], expected[i])]
        assert not differ, (s["rid"], [(c["instance"], c["tokens"]) for c in s["chunks"]], differ, len(got))


def test_routings_need_the_instances_flag(seer_url):
    """The shared test server runs without --enable-return-routed-experts: asking is a 400 that says so."""
    r = httpx.post(f"{seer_url}/generate", json={"input_ids": [5, 6, 7], "return_routed_experts": True,
                                                 "sampling_params": {"max_new_tokens": 2}}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "routed_experts_not_enabled", r.text
    r = httpx.post(f"{seer_url}/generate", json={"input_ids": [5, 6, 7], "return_routed_experts": True,
                                                 "routed_experts_start_len": 4,
                                                 "sampling_params": {"max_new_tokens": 2}}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "routed_experts_start_len", r.text
