"""Divided rollout on real engines: chunked samples are exactly what unchunked ones would be."""

import random
import threading

import httpx
import pytest
from scipy.stats import chi2_contingency

CHUNK = 16


def set_scheduler(url, name, **kw):
    """Chunks of exactly ``chunk_size`` (not aligned to KV pages): these tests look for the
    boundaries at multiples of CHUNK."""
    r = httpx.post(f"{url}/scheduler", json={"name": name, "align_to_pages": False, **kw}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == name
    return r.json()


@pytest.fixture
def restore_scheduler(seer_url):
    before = httpx.get(f"{seer_url}/scheduler").json()
    yield
    set_scheduler(seer_url, before.pop("name"), **before)


def prompts(n, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(3, 2048) for _ in range(rng.randint(4, 40))] for _ in range(n)]


def rollout(url, body):
    r = httpx.post(f"{url}/v1/rollout", json=body, timeout=600)
    assert r.status_code == 200, r.text
    return sorted(r.json()["samples"], key=lambda s: (s["prompt_index"], s["index"]))


def test_temperature_0_chunked_tokens_equal_plain_sglang_for_every_policy(seer_url, plain_url, restore_scheduler):
    ids = prompts(8)
    body = {"prompts": [{"input_ids": p} for p in ids], "n": 4, "max_tokens": 40, "temperature": 0}
    with httpx.Client(timeout=600) as http:
        plain = [http.post(f"{plain_url}/generate", json={"input_ids": p, "sampling_params": {
            "max_new_tokens": 40, "temperature": 0}}).json()["output_ids"] for p in ids]
    results = {}
    for name in ("group", "divided", "context"):
        set_scheduler(seer_url, name, chunk_size=CHUNK)
        samples = rollout(seer_url, body)
        assert len(samples) == 32
        for s in samples:
            assert s["output_ids"] == plain[s["prompt_index"]], (name, s["prompt_index"], s["index"])
            chunks = len(s["chunks"])
            expected = 1 if name == "group" else -(-len(s["output_ids"]) // CHUNK)
            assert chunks == expected, (name, chunks)
        results[name] = [s["output_ids"] for s in samples]
    assert results["group"] == results["divided"] == results["context"]


def test_chunks_move_between_instances_and_logprobs_concatenate(seer_url, restore_scheduler):
    set_scheduler(seer_url, "context", chunk_size=8)
    body = {"prompts": [{"input_ids": p} for p in prompts(4, seed=1)], "n": 4, "max_tokens": 48,
            "temperature": 1.0, "ignore_eos": True, "seed": 5}
    samples = rollout(seer_url, body)
    assert all(len(s["output_ids"]) == 48 == len(s["logprobs"]) for s in samples)
    assert all(len(s["chunks"]) == 6 and sum(c["tokens"] for c in s["chunks"]) == 48 for s in samples)
    assert {c["instance"] for s in samples for c in s["chunks"]} == {0, 1}
    # a continuation finds its own prefix in the radix cache when it stays on the same instance
    stayed = [c for s in samples for a, c in zip(s["chunks"], s["chunks"][1:]) if a["instance"] == c["instance"]]
    assert stayed and max(c["cached_tokens"] for c in stayed) > 8


def test_seeded_sampling_is_identical_chunked_and_unchunked(seer_url, restore_scheduler):
    body = {"prompts": [{"input_ids": p} for p in prompts(4, seed=2)], "n": 4, "max_tokens": 40,
            "temperature": 1.0, "top_p": 0.9, "top_k": 50, "seed": 1234}
    set_scheduler(seer_url, "group")
    whole = rollout(seer_url, body)
    set_scheduler(seer_url, "context", chunk_size=CHUNK)
    chunked = rollout(seer_url, body)
    assert [s["output_ids"] for s in chunked] == [s["output_ids"] for s in whole]
    assert max(len(s["chunks"]) for s in chunked) >= 2
    assert len({tuple(s["output_ids"]) for s in whole}) == len(whole)  # siblings differ


def test_a_seeded_sample_is_the_same_beside_greedy_requests(seer_url, restore_scheduler):
    """Temperature 1 with a seed, chunked: the same tokens alone as while a greedy rollout shares the
    instances' batches (a greedy row used to send every row through SGLang's rank-keyed top-k draw)."""
    set_scheduler(seer_url, "context", chunk_size=CHUNK)
    seeded = {"prompts": [{"input_ids": p} for p in prompts(4, seed=21)], "n": 4, "max_tokens": 48,
              "temperature": 1.0, "seed": 77, "ignore_eos": True}
    greedy = {"prompts": [{"input_ids": p} for p in prompts(4, seed=22)], "n": 4, "max_tokens": 64,
              "temperature": 0, "ignore_eos": True}
    alone = rollout(seer_url, seeded)
    box: dict = {}
    beside = threading.Thread(target=lambda: box.update(g=rollout(seer_url, greedy)))
    beside.start()
    mixed = rollout(seer_url, seeded)
    beside.join()
    assert len(box["g"]) == 16
    assert [s["output_ids"] for s in mixed] == [s["output_ids"] for s in alone]


def test_logprobs_across_chunk_boundaries_equal_unchunked_runs(seer_url, plain_url, restore_scheduler):
    """Chunks of 16 on the speculative server (float32): temperature 0 against plain SGLang run
    unchunked, temperature 1 with a seed against the same request unchunked; tokens equal and every
    logprob within 1e-4, also at the chunk boundaries."""
    ids = prompts(3, seed=9)
    set_scheduler(seer_url, "context", chunk_size=CHUNK)
    greedy = rollout(seer_url, {"prompts": [{"input_ids": p} for p in ids], "n": 1, "max_tokens": 56,
                                "temperature": 0, "ignore_eos": True, "logprobs": True})
    with httpx.Client(timeout=600) as http:
        for s, p in zip(greedy, ids):
            ref = http.post(f"{plain_url}/generate", json={
                "input_ids": p, "return_logprob": True, "logprob_start_len": -1,
                "sampling_params": {"max_new_tokens": 56, "temperature": 0, "ignore_eos": True}}).json()
            assert len(s["chunks"]) == 4 and s["output_ids"] == ref["output_ids"]
            want = [lp for lp, *_ in ref["meta_info"]["output_token_logprobs"]]
            assert max(abs(a - b) for a, b in zip(s["logprobs"], want)) < 1e-4
    seeded = {"prompts": [{"input_ids": p} for p in ids], "n": 2, "max_tokens": 56, "temperature": 1.0,
              "ignore_eos": True, "logprobs": True, "seed": 77}
    chunked = rollout(seer_url, seeded)
    set_scheduler(seer_url, "group")
    whole = rollout(seer_url, seeded)
    for c, w in zip(chunked, whole):
        assert len(c["chunks"]) == 4 and len(w["chunks"]) == 1
        assert c["output_ids"] == w["output_ids"]
        assert max(abs(a - b) for a, b in zip(c["logprobs"], w["logprobs"])) < 1e-4


def _seeded_draw(logprobs: list[float], seed: int, position: int) -> int:
    """SGLang's seeded draw (``sampler.multinomial_with_seed``: Gumbel noise hashed from seed, position
    and token) over one distribution. Its hash is a CUDA/AMX kernel; on CPU the plugin's bit-identical
    torch twin stands in, as it does inside the instances."""
    from unittest import mock

    import sglang.srt.layers.sampler as sampler
    import torch

    from seer_sglang.plugin.seeded_sampling import murmur_hash32_torch

    draw = getattr(sampler.multinomial_with_seed, "__wrapped__", sampler.multinomial_with_seed)
    with mock.patch.object(sampler, "murmur_hash32", murmur_hash32_torch):
        token = draw(torch.tensor([logprobs], dtype=torch.float64), torch.tensor([seed]), torch.tensor([position]))
    return int(token.view(-1)[0])


def test_seeded_chunked_speculative_samples_are_sglangs_draws_from_plain_sglang(seer_url, plain_url,
                                                                               restore_scheduler):
    """Temperature 1 with a seed, chunks of 16 on the speculative server: every token is the draw SGLang's
    seeded sampler makes from plain SGLang's distribution (no plugin) at that position, and every logprob
    is plain SGLang's within 1e-4. (Plain SGLang on CPU cannot draw seeded samples itself: it does so only
    under --enable-deterministic-inference, which its CPU attention backend refuses.)"""
    from seer_sglang.core.request import derive_seed, group_seed_key

    ids = prompts(2, seed=21)
    set_scheduler(seer_url, "context", chunk_size=CHUNK)
    body = {"prompts": [{"input_ids": p, "group_id": f"ref-{i}"} for i, p in enumerate(ids)], "n": 2,
            "max_tokens": 40, "temperature": 1.0, "ignore_eos": True, "logprobs": True, "seed": 123}
    samples = rollout(seer_url, body)
    vocab = 2048
    with httpx.Client(timeout=600) as http:
        for s in samples:
            prompt, out = ids[s["prompt_index"]], s["output_ids"]
            assert len(s["chunks"]) >= 3
            ref = http.post(f"{plain_url}/generate", json={
                "input_ids": prompt + out[:-1], "return_logprob": True, "logprob_start_len": len(prompt) - 1,
                "top_logprobs_num": vocab, "sampling_params": {"max_new_tokens": 1, "temperature": 1.0}}).json()
            meta = ref["meta_info"]
            # the distribution of output token k: the input's (k = 0 .. L-2; SGLang gives none for the first
            # token it covers, the prompt's last), then the one generated token's
            dists = meta["input_top_logprobs"][1:len(out)] + meta["output_top_logprobs"][:1]
            seed = derive_seed(123, group_seed_key(prompt, s["prompt_index"], f"ref-{s['prompt_index']}"), s["index"])
            for k, (token, dist) in enumerate(zip(out, dists)):
                logprobs = [float("-inf")] * vocab
                for lp, tid, *_ in dist:
                    logprobs[tid] = lp
                assert abs(logprobs[token] - s["logprobs"][k]) < 1e-4, (s["rid"], k)
                # SGLang seeds the draw for token k with the position of the step's input token
                assert _seeded_draw(logprobs, seed, len(prompt) + k - 1) == token, (s["rid"], k)


def test_temperature_1_chunked_distribution_equals_plain_sglang(seer_url, plain_url, restore_scheduler):
    """Two-sample chi-square on the tokens right after a chunk boundary (positions 16 and 17):
    chunked seer samples (random seeds) vs plain SGLang's own sampler on the same prompt."""
    prompt = prompts(1, seed=3)[0]
    n = 256
    set_scheduler(seer_url, "context", chunk_size=CHUNK)
    ours = rollout(seer_url, {"prompts": [{"input_ids": prompt}], "n": n, "max_tokens": 18,
                              "temperature": 1.0, "ignore_eos": True})
    # position CHUNK starts a new chunk (a chunk lost to a slow instance may add one more later)
    assert all(len(s["chunks"]) >= 2 and s["chunks"][0]["tokens"] == CHUNK for s in ours)
    with httpx.Client(timeout=600) as http:
        theirs = http.post(f"{plain_url}/generate", json={"input_ids": [prompt] * n, "sampling_params": {
            "max_new_tokens": 18, "temperature": 1.0, "ignore_eos": True}}).json()
    plain_ids = [t["output_ids"] for t in theirs]
    for pos in (0, CHUNK, CHUNK + 1):
        a = [s["output_ids"][pos] for s in ours]
        b = [ids[pos] for ids in plain_ids]
        common = [t for t in set(a) | set(b) if a.count(t) + b.count(t) >= 10]
        table = [[a.count(t) for t in common] + [sum(x not in common for x in a)],
                 [b.count(t) for t in common] + [sum(x not in common for x in b)]]
        table = [row for row in zip(*table) if sum(row) > 0]
        p = chi2_contingency(list(zip(*table))).pvalue
        assert p > 0.001, (pos, p, table)
    # the sampler is not degenerate: the first token varies
    assert len({s["output_ids"][0] for s in ours}) > 3


def test_stop_string_across_a_chunk_boundary(seer_url, plain_url, restore_scheduler):
    prompt = prompts(1, seed=4)[0]
    set_scheduler(seer_url, "group")
    ref = rollout(seer_url, {"prompts": [{"input_ids": prompt}], "max_tokens": 40, "temperature": 0})[0]
    ids = ref["output_ids"]
    from seer_sglang.frontend.tokenizer import PromptTokenizer

    tok = PromptTokenizer(httpx.get(f"{seer_url}/v1/models").json()["data"][0]["root"])
    before, after = tok.decode(ids[:CHUNK]), tok.decode(ids[:CHUNK + 1])
    assert after.startswith(before) and len(after) > len(before)
    stop = before[-2:] + after[len(before):len(before) + 1]  # ends inside token CHUNK, starts before it
    assert stop not in before and stop not in tok.decode(ids[CHUNK:])
    with httpx.Client(timeout=600) as http:
        plain = http.post(f"{plain_url}/generate", json={"input_ids": prompt, "sampling_params": {
            "max_new_tokens": 40, "temperature": 0, "stop": [stop]}}).json()
    set_scheduler(seer_url, "context", chunk_size=CHUNK)
    ours = rollout(seer_url, {"prompts": [{"input_ids": prompt}], "max_tokens": 40, "temperature": 0,
                              "stop": stop})[0]
    assert ours["finish_reason"] == "stop" and len(ours["chunks"]) == 2
    assert ours["text"] == plain["text"] == tok.decode(ids)[:tok.decode(ids).find(stop)]
    assert ours["output_ids"] == plain["output_ids"]


def test_timeline_and_in_instance_queue_order(seer_url, servers, restore_scheduler):
    set_scheduler(seer_url, "context", chunk_size=CHUNK)
    body = {"prompts": [{"input_ids": p} for p in prompts(12, seed=6)], "n": 8, "max_tokens": 64,
            "temperature": 1.0, "ignore_eos": True, "return_timeline": True}
    r = httpx.post(f"{seer_url}/v1/rollout", json=body, timeout=600)
    assert r.status_code == 200
    summary = r.json()["summary"]
    assert summary["chunks"] == 96 * 4 and summary["instances_used"] == [0, 1]
    points = summary["timeline"]
    assert {p["instance"] for p in points} == {0, 1}
    assert max(p["kv_used"] for p in points) > 0 and max(p["inflight"] for p in points) > 0
    assert all(p["kv_capacity"] == 16384 for p in points)
    timeline = httpx.get(f"{seer_url}/timeline", params={"since": points[0]["t"]}).json()
    assert len(timeline["points"]) >= len(points) and len(timeline["retractions"]) == 2
    # the plugin re-sorted a real waiting queue by the router's priorities
    logs = "".join(p.read_text() for p in servers.seer.log_dir.glob("instance-*.log"))
    assert "length-context queue order active" in logs
