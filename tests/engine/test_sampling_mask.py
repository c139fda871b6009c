"""Top-p / top-k replay through divided rollout (SGLang's ``return_sampling_mask``): every output token
comes with the support its cut left and its behaviour logprob there. A sample's supports are those
plain SGLang computes at the same positions, and chunking or moving it changes neither its tokens nor
its supports."""

from __future__ import annotations

import httpx
import pytest

from conftest import chunked, moved_rollout

CHUNK = 16
TOKENS = 48
PROMPTS = [[9 + i, 310 + 13 * i, 44, 15, 970 - i, 6, 70, 1400 + i, 2, 61] for i in range(4)]
CUT = {"temperature": 1.0, "top_k": 8, "top_p": 0.8}


@pytest.fixture(autouse=True)
def _scheduler_kept(servers):
    """The tests set the shared server's scheduler (chunks of 16); it is put back as it was."""
    before = httpx.get(f"{servers.seer.url}/scheduler", timeout=30).json()
    yield
    httpx.post(f"{servers.seer.url}/scheduler", json=before, timeout=30).raise_for_status()


def _plain_supports(plain_url: str, prompt: list[int], output: list[int]) -> list[dict]:
    """Plain SGLang's support at each position of ``output`` after ``prompt``: one token per prefix."""
    r = httpx.post(f"{plain_url}/generate", json={
        "input_ids": [prompt + output[:t] for t in range(len(output))], "return_sampling_mask": True,
        "sampling_logprobs_mode": "support", "sampling_params": {"max_new_tokens": 1, **CUT}}, timeout=300)
    assert r.status_code == 200, r.text
    return [a["meta_info"] for a in r.json()]


def _assert_supports_are_plain_sglangs(plain_url: str, prompt: list[int], output: list[int], masks: list,
                                       logprobs: list) -> None:
    assert len(masks) == len(logprobs) == len(output)
    for t, plain in enumerate(_plain_supports(plain_url, prompt, output)):
        assert masks[t] == plain["output_token_sampling_mask"][0], t
        assert output[t] in masks[t] and len(masks[t]) <= CUT["top_k"]
        assert logprobs[t] == pytest.approx(plain["output_token_sampling_logprobs"][0], abs=1e-4), t


def test_supports_of_moved_samples_are_plain_sglangs_and_chunking_changes_nothing(servers):
    seer_url, plain_url = servers.seer.url, servers.plain.url
    body = {"prompts": [{"input_ids": p} for p in PROMPTS], "n": 2, "max_tokens": TOKENS, "ignore_eos": True,
            "seed": 11, "return_sampling_mask": True, "sampling_logprobs_mode": "support", **CUT}
    moved = moved_rollout(seer_url, body, CHUNK)
    chunked(seer_url, 4 * TOKENS)  # every sample in one chunk
    try:
        r = httpx.post(f"{seer_url}/v1/rollout", json=body, timeout=600)
    finally:
        chunked(seer_url, CHUNK)
    assert r.status_code == 200, r.text
    whole = {(s["prompt_index"], s["index"]): s for s in r.json()["samples"]}
    for s in moved:
        w = whole[(s["prompt_index"], s["index"])]
        assert len(w["chunks"]) == 1 and len(s["chunks"]) == 3
        assert (s["output_ids"], s["sampling_mask"]) == (w["output_ids"], w["sampling_mask"])
        # a continuation's first logprob comes from a prefill, not a decode step: equal to float32 rounding
        for a, b in zip(s["sampling_logprobs"], w["sampling_logprobs"]):
            assert a == pytest.approx(b, abs=1e-4)
    assert len({tuple(s["output_ids"]) for s in moved}) > 1  # temperature 1: the samples differ
    for s in moved[:2]:
        _assert_supports_are_plain_sglangs(plain_url, PROMPTS[s["prompt_index"]], s["output_ids"],
                                           s["sampling_mask"], s["sampling_logprobs"])


def test_generate_returns_sglangs_sampling_fields(servers):
    seer_url, plain_url = servers.seer.url, servers.plain.url
    chunked(seer_url, CHUNK)
    greedy = {"input_ids": PROMPTS[0], "return_sampling_mask": True,
              "sampling_params": {"max_new_tokens": TOKENS, "temperature": 0, "ignore_eos": True}}
    got, want = (httpx.post(f"{url}/generate", json=greedy, timeout=300).json() for url in (seer_url, plain_url))
    assert got["output_ids"] == want["output_ids"]
    for key in ("output_token_sampling_mask", "output_token_sampling_logprobs", "output_token_sampling_mask_length"):
        assert got["meta_info"][key] == want["meta_info"][key], key
    assert got["meta_info"]["output_token_sampling_mask"] == [[t] for t in want["output_ids"]]
    # temperature 1 with a cut, in the "selected" mode: the drawn token's logprob within its support
    r = httpx.post(f"{seer_url}/generate", json={
        "input_ids": PROMPTS[1], "return_sampling_mask": True, "rid": "replay-1",
        "sampling_params": {"max_new_tokens": TOKENS, "ignore_eos": True, "sampling_seed": 5, **CUT}}, timeout=300)
    assert r.status_code == 200, r.text
    out, meta = r.json()["output_ids"], r.json()["meta_info"]
    assert meta["output_token_sampling_mask_length"] == len(out) == TOKENS
    plain = _plain_supports(plain_url, PROMPTS[1], out)
    for t, (mask, lp) in enumerate(zip(meta["output_token_sampling_mask"], meta["output_token_sampling_logprobs"])):
        support = plain[t]["output_token_sampling_mask"][0]
        assert mask == support, t
        assert lp == pytest.approx(plain[t]["output_token_sampling_logprobs"][0][support.index(out[t])], abs=1e-4)


def test_speculating_instances_give_every_tokens_support(servers):
    """seer's instances draft by default: a batch holding a request that asks for supports decodes
    without drafts, through SGLang's own sampler, so the supports are plain SGLang's there too."""
    seer_url, plain_url = servers.seer.url, servers.plain.url
    greedy = {"input_ids": PROMPTS[2], "return_sampling_mask": True,
              "sampling_params": {"max_new_tokens": TOKENS, "temperature": 0, "ignore_eos": True}}
    got, want = (httpx.post(f"{url}/generate", json=greedy, timeout=300).json() for url in (seer_url, plain_url))
    assert got["output_ids"] == want["output_ids"], got
    assert got["meta_info"]["output_token_sampling_mask"] == want["meta_info"]["output_token_sampling_mask"]
    r = httpx.post(f"{seer_url}/v1/rollout", json={
        "prompts": [{"input_ids": PROMPTS[3]}], "n": 2, "max_tokens": TOKENS, "ignore_eos": True, "seed": 3,
        "return_sampling_mask": True, "sampling_logprobs_mode": "support", **CUT}, timeout=600)
    assert r.status_code == 200, r.text
    for s in r.json()["samples"]:
        _assert_supports_are_plain_sglangs(plain_url, PROMPTS[3], s["output_ids"], s["sampling_mask"],
                                           s["sampling_logprobs"])


def test_a_support_the_instances_cannot_give_is_a_400(servers):
    body = {"input_ids": PROMPTS[0], "return_sampling_mask": True,
            "sampling_params": {"max_new_tokens": 4, "temperature": 1.0}}  # no finite top-k
    r = httpx.post(f"{servers.seer.url}/generate", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "sampling_params.top_k", r.text
    r = httpx.post(f"{servers.seer.url}/generate", json={**body, "sampling_logprobs_mode": "all"}, timeout=60)
    assert r.status_code == 400, r.text
    r = httpx.post(f"{servers.seer.url}/v1/rollout", json={
        "prompts": [{"input_ids": PROMPTS[0]}], "max_tokens": 4, "return_sampling_mask": True, "temperature": 1.0},
        timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "sampling_params.top_k", r.text
