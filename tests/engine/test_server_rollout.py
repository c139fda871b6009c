"""The batch rollout API and the typed client."""

import json

import httpx
import pytest

from seer_sglang.client import RolloutClient, RolloutError
from seer_sglang.frontend.tokenizer import PromptTokenizer


@pytest.fixture(scope="module")
def tok(tiny_model):
    return PromptTokenizer(tiny_model)


def test_rollout_ids_logprobs_and_text_agree(seer_url, tok):
    body = {"prompts": ["the total of 4 apples", {"messages": [{"role": "user", "content": "2+3?"}]},
                        {"input_ids": [5, 6, 7, 8, 9]}],
            "n": 3, "max_tokens": 20, "temperature": 1.0, "top_p": 0.95, "top_k": 50, "seed": 11,
            "logprobs": True, "top_logprobs": 3}
    r = httpx.post(f"{seer_url}/v1/rollout", json=body, timeout=300)
    assert r.status_code == 200, r.text
    data = r.json()
    samples = data["samples"]
    assert len(samples) == 9 and data["summary"]["samples"] == 9 and data["summary"]["failed"] == 0
    assert sorted((s["prompt_index"], s["index"]) for s in samples) == [(p, i) for p in range(3) for i in range(3)]
    for s in samples:
        assert 1 <= len(s["output_ids"]) <= 20 and s["completion_tokens"] == len(s["output_ids"])
        assert len(s["logprobs"]) == len(s["output_ids"]) and all(lp <= 0 for lp in s["logprobs"])
        assert len(s["top_logprobs"]) == len(s["output_ids"])
        for tid, lp, top in zip(s["output_ids"], s["logprobs"], s["top_logprobs"]):
            assert len(top) == 3
            assert lp <= max(v for _, v in top) + 1e-5  # top-k holds the best candidates
            if tid in [t for t, _ in top]:
                assert abs(dict((t, v) for t, v in top)[tid] - lp) < 1e-4
        assert s["text"] == tok.decode(s["output_ids"])
        assert s["finish_reason"] in ("stop", "length")
        assert s["timing"]["latency_s"] > 0 and s["chunks"] and s["chunks"][0]["instance"] in (0, 1)
    # the shared server runs the default speculative decoding: steps and accepted drafts per sample and chunk
    spec = data["summary"]["spec"]
    assert spec["draft_steps"] == sum(s["spec"]["draft_steps"] for s in samples) > 0
    assert spec["accepted_tokens"] == sum(s["spec"]["accepted_tokens"] for s in samples)
    for s in samples:
        assert s["spec"]["draft_steps"] == sum(c["spec"]["draft_steps"] for c in s["chunks"])
        assert s["spec"]["draft_steps"] + s["spec"]["accepted_tokens"] <= len(s["output_ids"])
    assert spec["mean_acceptance_length"] == (spec["accepted_tokens"] + spec["draft_steps"]) / spec["draft_steps"]
    chat_prompt = tok.encode_chat([{"role": "user", "content": "2+3?"}])
    assert next(s for s in samples if s["prompt_index"] == 1)["prompt_tokens"] == len(chat_prompt)
    assert next(s for s in samples if s["prompt_index"] == 2)["prompt_tokens"] == 5


def test_rollout_streams_ndjson_one_line_per_sample(seer_url):
    body = {"prompts": ["a", "b"], "n": 2, "max_tokens": 6, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{seer_url}/v1/rollout", json=body, timeout=300) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line.strip()]
    assert [line["type"] for line in lines] == ["sample"] * 4 + ["summary"]
    assert lines[-1]["samples"] == 4 and lines[-1]["completion_tokens"] == sum(
        len(line["output_ids"]) for line in lines[:-1])


def test_rollout_client_typed_results(seer_url):
    with RolloutClient(seer_url) as client:
        result = client.rollout(["What is 2+3?", [5, 6, 7], [{"role": "user", "content": "hi"}]], n=2,
                                max_tokens=8, temperature=0.7, progress=True)
        assert len(result.samples) == 6
        groups = result.by_prompt()
        assert [len(g) for g in groups] == [2, 2, 2]
        assert all(len(s.output_ids) == len(s.logprobs) for s in result.samples)
        assert result.summary["completion_tokens"] == sum(len(s.output_ids) for s in result.samples)
        with pytest.raises(RolloutError) as err:
            client.rollout(["x"], n=0, progress=False)
        assert err.value.status_code == 400


def test_group_id_is_kept_and_duplicates_rejected(seer_url):
    r = httpx.post(f"{seer_url}/v1/rollout", json={"prompts": [{"text": "a", "group_id": "my-group"}], "n": 2,
                                                   "max_tokens": 3}, timeout=300)
    assert r.status_code == 200
    assert {s["group_id"] for s in r.json()["samples"]} == {"my-group"}
    r = httpx.post(f"{seer_url}/v1/rollout", json={"prompts": [{"text": "a", "group_id": "dup"},
                                                               {"text": "b", "group_id": "dup"}], "max_tokens": 3},
                   timeout=300)
    assert r.status_code == 400 and "dup" in r.json()["error"]["message"]


def test_seeds_are_independent_across_groups_and_reproduce_per_request(seer_url):
    """Temperature 1, the same prompt twice in one rollout with seed 0: the two groups draw different
    samples. The same request again: the same samples. Without a seed: different samples each time."""
    def rollout(seed):
        body = {"prompts": [{"input_ids": [5, 6, 7, 8, 9]}, {"input_ids": [5, 6, 7, 8, 9]}], "n": 3,
                "max_tokens": 24, "temperature": 1.0, "ignore_eos": True, **({} if seed is None else {"seed": seed})}
        r = httpx.post(f"{seer_url}/v1/rollout", json=body, timeout=300)
        assert r.status_code == 200, r.text
        by_prompt = [[], []]
        for s in sorted(r.json()["samples"], key=lambda s: (s["prompt_index"], s["index"])):
            by_prompt[s["prompt_index"]].append(s["output_ids"])
        return by_prompt

    first = rollout(0)
    assert first[0] != first[1]  # same prompt, other group: other noise
    assert all(a != b for a, b in zip(first[0], first[1]))  # not even sibling i of each
    assert rollout(0) == first
    assert rollout(None) != rollout(None)
