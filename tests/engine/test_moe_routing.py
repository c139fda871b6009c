"""Routing replay across chunks on a MoE model (the local random Qwen3-VL-MoE): a sample's expert routings,
asked as slime's and veRL's MoE recipes ask them (``return_routed_experts``), equal plain SGLang's
answer to the unchunked request, position by position, when the sample ran in chunks of 16 on two
instances, for text prompts and for prompts with an image. One model serves both: its language model
is a Qwen3-MoE, and its image positions are the case the text model cannot show."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from conftest import chunked, moved_rollout, png_data_url, seer_beside_plain
from seer_sglang.models import prepare

CHUNK = 16
LAYERS, TOP_K = 2, 2  # the tiny MoE's
ROUTING_ARGS = ("--dtype", "float32", "--enable-return-routed-experts")


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """(seer with 2 instances, a plain SGLang instance, the model), all of the tiny Qwen3-VL-MoE with routing
    capture."""
    model = str(prepare("tiny-vl-moe"))
    logs = tmp_path_factory.mktemp("moe")
    with seer_beside_plain(model, logs, list(ROUTING_ARGS)) as (seer, plain):
        _scheduler(seer.url)
        yield seer.url, plain.url, model


def _scheduler(url: str, **settings) -> None:
    chunked(url, CHUNK, **settings)


def _rows(answer: dict) -> np.ndarray:
    raw = base64.b64decode(answer["meta_info"]["routed_experts"])
    return np.frombuffer(raw, dtype=np.int32).reshape(-1, LAYERS, TOP_K)


def _prompt(i: int) -> list[int]:
    return [7 + i, 300 + 11 * i, 41, 12, 990 - i, 5, 77, 1500 + i, 3, 64, 128 + i]


def test_routed_experts_over_chunks_and_instances_equal_the_unchunked_answer(moe):
    seer_url, plain_url, _ = moe
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
    seer_url, plain_url, _ = moe
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


IMAGE_QUESTION = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Which experts see {}?<|im_end|>\n" \
                 "<|im_start|>assistant\n"


def test_routings_of_an_image_prompt_over_chunks_equal_the_unchunked_answer(moe):
    """An image's placeholder is one id of the prompt and several positions on the instance. In chunks of 16,
    a sample's routings, from the prompt's start or from a position past its ids (the instance counts the
    expanded prompt), are plain SGLang's unchunked answer position by position, and its tokens are too."""
    seer_url, plain_url, model = moe
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = [tokenizer.encode(IMAGE_QUESTION.format(i)) for i in range(2)]
    images = [png_data_url(50 + i, (128, 96)) for i in range(2)]

    def body(ids, image, start=0):
        return {"input_ids": ids, "image_data": [image], "return_routed_experts": True,
                "routed_experts_start_len": start,
                "sampling_params": {"max_new_tokens": 40, "temperature": 0, "ignore_eos": True}}

    want = [httpx.post(f"{plain_url}/generate", json=body(p, im), timeout=300).json() for p, im in zip(prompts, images)]
    expanded = want[0]["meta_info"]["prompt_tokens"]
    assert expanded > len(prompts[0])  # the image's positions
    samples = httpx.post(f"{seer_url}/v1/rollout", json={
        "prompts": [{"input_ids": p, "image_data": [im]} for p, im in zip(prompts, images)], "n": 1,
        "max_tokens": 40, "temperature": 0, "ignore_eos": True, "return_routed_experts": True},
        timeout=600).json()["samples"]
    for s in samples:
        expected = want[s["prompt_index"]]
        assert len(s["chunks"]) == 3 and s["output_ids"] == expected["output_ids"]
        got = _rows({"meta_info": s})
        assert got.shape == (expected["meta_info"]["prompt_tokens"] + 40 - 1, LAYERS, TOP_K)
        assert np.array_equal(got, _rows(expected)), s["prompt_index"]
    inside = expanded - 2  # past the prompt's ids: a start only the expanded count holds
    assert inside > len(prompts[0])
    unchunked = httpx.post(f"{plain_url}/generate", json=body(prompts[0], images[0], inside), timeout=300).json()
    chunked_answer = httpx.post(f"{seer_url}/generate", json=body(prompts[0], images[0], inside), timeout=300).json()
    assert chunked_answer["output_ids"] == unchunked["output_ids"]
    assert _rows(chunked_answer).shape[0] == expanded + 40 - 1 - inside
    assert np.array_equal(_rows(chunked_answer), _rows(unchunked))
    assert len({tuple(r.ravel()) for r in _rows(want[0])}) > 4  # the rows are not all alike
    # a start past the expanded prompt: the instance refuses it, as plain SGLang does, and stays up
    beyond = httpx.post(f"{seer_url}/generate", json=body(prompts[0], images[0], expanded + 100), timeout=300)
    refused = httpx.post(f"{plain_url}/generate", json=body(prompts[0], images[0], expanded + 100), timeout=300)
    assert 400 <= beyond.status_code < 500 and 400 <= refused.status_code < 500, (beyond.text, refused.text)
    assert httpx.get(f"{seer_url}/health", timeout=30).status_code == 200
