"""SGLang's native ``POST /generate`` on seer_sglang against plain SGLang (tiny model, float32, CPU),
with the request bodies the trainers send, taken from their source."""

from __future__ import annotations

import asyncio
import json
import random
import uuid

import httpx
import pytest

from conftest import BackgroundRollout, _counter, wait_until

PROMPT_IDS = [1, 17, 42, 99, 7, 256, 3]

# slime/rollout/sglang_rollout.py (THUDM/slime 624b824), GenerateState.__init__ + generate(): None values are
# sent as null; no rid, no n, one request per sample.
SLIME = {"input_ids": PROMPT_IDS,
         "sampling_params": {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 24, "stop": None,
                             "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True,
                             "spaces_between_special_tokens": False},
         "return_logprob": True}
# areal/engine/sglang_remote.py (inclusionAI/AReaL 4aef98d), SGLangBackend.build_generation_request; a
# text request's image_data is ModelRequest's default, []. test_areal.py drives AReaL 1.0.4's own code.
AREAL = {"input_ids": PROMPT_IDS, "image_data": [],
         "sampling_params": {"top_p": 1.0, "top_k": 100000000, "max_new_tokens": 24, "temperature": 0.0,
                             "stop_token_ids": [], "ignore_eos": False, "skip_special_tokens": True,
                             "frequency_penalty": 0.0},
         "return_logprob": True, "stream": False}
# verl/workers/rollout/sglang_rollout/async_sglang_server.py (volcengine/verl b178a3c), SGLangHttpServer.generate:
# the GenerateReqInput it builds (a fresh uuid rid per turn); the sampling params of agent_loop.py.
VERL = {"rid": "<uuid>", "input_ids": PROMPT_IDS,
        "sampling_params": {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
                            "max_new_tokens": 24},
        "return_logprob": True, "image_data": None}
# What each trainer reads from the answer (same sources; slime's Sample._apply_meta_info in slime/utils/types.py).
READS = {"slime": ["text", "meta_info.output_token_logprobs", "meta_info.finish_reason", "meta_info.weight_version",
                   "meta_info.cached_tokens", "meta_info.prompt_tokens", "meta_info.completion_tokens"],
         "areal": ["meta_info.finish_reason", "meta_info.output_token_logprobs"],
         "verl": ["meta_info.output_token_logprobs", "output_ids"]}


def _body(template: dict) -> dict:
    body = json.loads(json.dumps(template))
    if body.get("rid") == "<uuid>":
        body["rid"] = uuid.uuid4().hex
    return body


def _get(d: dict, path: str):
    for part in path.split("."):
        assert part in d, f"answer lacks {path}"
        d = d[part]
    return d


def _same_sample(seer: dict, plain: dict) -> None:
    """Same tokens, text, finish reason and logprobs (to float32 noise) as plain SGLang."""
    assert seer["output_ids"] == plain["output_ids"]
    assert seer["text"] == plain["text"]
    sm, pm = seer["meta_info"], plain["meta_info"]
    assert sm["finish_reason"] == pm["finish_reason"]
    for key in ("prompt_tokens", "completion_tokens"):
        assert sm[key] == pm[key], key
    missing = set(pm) - set(sm)
    assert not missing, f"seer's meta_info lacks plain SGLang's {sorted(missing)}"
    for key in ("reasoning_tokens", "output_token_logprobs_length"):
        if key in pm:
            assert sm[key] == pm[key], key
    for key in ("output_token_logprobs", "input_token_logprobs"):
        if key in pm:
            got, want = sm[key], pm[key]
            assert [e[1] for e in got] == [e[1] for e in want], key
            assert [e[2] for e in got] == [e[2] for e in want], key
            for a, b in zip(got, want):
                assert (a[0] is None) == (b[0] is None) and (a[0] is None or abs(a[0] - b[0]) < 1e-3), key


@pytest.mark.parametrize("trainer,template", [("slime", SLIME), ("areal", AREAL), ("verl", VERL)])
def test_trainer_bodies_get_what_plain_sglang_answers(trainer, template, seer_url, plain_url):
    body = _body(template)
    seer = httpx.post(f"{seer_url}/generate", json=body, timeout=300)
    plain = httpx.post(f"{plain_url}/generate", json=body, timeout=300)
    assert seer.status_code == plain.status_code == 200, seer.text
    s, p = seer.json(), plain.json()
    assert isinstance(s, dict) and isinstance(p, dict)
    for path in READS[trainer]:
        _get(s, path)
    assert set(p) <= set(s)
    _same_sample(s, p)
    assert isinstance(s["meta_info"]["weight_version"], str)
    if "rid" in body:
        assert s["meta_info"]["id"] == body["rid"]


def test_batch_with_n_answers_prompt_major_like_sglang(seer_url, plain_url):
    body = {"text": ["The capital of France is", "1, 2, 3,"],
            "sampling_params": {"temperature": 0, "max_new_tokens": 6, "n": 2},
            "return_logprob": True, "top_logprobs_num": 2}
    seer = httpx.post(f"{seer_url}/generate", json=body, timeout=300).json()
    plain = httpx.post(f"{plain_url}/generate", json=body, timeout=300).json()
    assert isinstance(seer, list) and len(seer) == len(plain) == 4
    for s, p in zip(seer, plain):
        _same_sample(s, p)
        assert [[e[1] for e in step] for step in s["meta_info"]["output_top_logprobs"]] == \
               [[e[1] for e in step] for step in p["meta_info"]["output_top_logprobs"]]
    # the two samples of a prompt are one group; the two prompts are two
    groups = [s["meta_info"]["group_id"] for s in seer]
    assert groups[0] == groups[1] != groups[2] == groups[3]


def test_stop_strings_and_stop_tokens_trim_as_sglang_does(seer_url, plain_url):
    plain_out = httpx.post(f"{plain_url}/generate", timeout=300, json={
        "input_ids": PROMPT_IDS, "sampling_params": {"temperature": 0, "max_new_tokens": 8}}).json()
    ids = plain_out["output_ids"]
    stop_token = ids[3]
    stop_text = httpx.post(f"{plain_url}/generate", timeout=300, json={
        "input_ids": PROMPT_IDS, "sampling_params": {"temperature": 0, "max_new_tokens": 4}}).json()["text"][-3:]
    for sp in ({"stop_token_ids": [stop_token]}, {"stop_token_ids": [stop_token], "no_stop_trim": True},
               {"stop": stop_text}, {"stop": stop_text, "no_stop_trim": True}):
        body = {"input_ids": PROMPT_IDS, "sampling_params": {"temperature": 0, "max_new_tokens": 8, **sp}}
        s = httpx.post(f"{seer_url}/generate", json=body, timeout=300).json()
        p = httpx.post(f"{plain_url}/generate", json=body, timeout=300).json()
        _same_sample(s, p)


def test_chunked_and_moved_samples_answer_as_one_request(seer_url, plain_url):
    """With 4-token chunks a 24-token sample runs in six chunks: the answer is still plain SGLang's
    (temperature 0), and a seeded sample draws what it draws unchunked."""
    before = httpx.get(f"{seer_url}/scheduler", timeout=30).json()
    seeded = {"rid": "chunked-seeded", "input_ids": PROMPT_IDS, "return_logprob": True,
              "sampling_params": {"temperature": 1.0, "max_new_tokens": 24, "sampling_seed": 11}}
    whole = httpx.post(f"{seer_url}/generate", json=seeded, timeout=300).json()
    try:
        assert httpx.post(f"{seer_url}/scheduler", json={"name": "context", "chunk_size": 4},
                          timeout=30).status_code == 200
        for template in (SLIME, AREAL):
            body = _body(template)
            _same_sample(httpx.post(f"{seer_url}/generate", json=body, timeout=300).json(),
                         httpx.post(f"{plain_url}/generate", json=body, timeout=300).json())
        chunked = httpx.post(f"{seer_url}/generate", json=seeded, timeout=300).json()
    finally:
        httpx.post(f"{seer_url}/scheduler", json=before, timeout=30)
    assert chunked["output_ids"] == whole["output_ids"]
    assert [e[1] for e in chunked["meta_info"]["output_token_logprobs"]] == whole["output_ids"]
    assert chunked["meta_info"]["completion_tokens"] == 24


def test_stream_is_cumulative_and_ends_like_the_plain_answer(seer_url, plain_url):
    body = {"input_ids": PROMPT_IDS, "sampling_params": {"temperature": 0, "max_new_tokens": 12},
            "return_logprob": True, "stream": True}
    events = []
    with httpx.stream("POST", f"{seer_url}/generate", json=body, timeout=300) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data:"):
                events.append(line[5:].strip())
    assert events[-1] == "[DONE]"
    outs = [json.loads(e) for e in events[:-1]]
    lengths = [len(o["output_ids"]) for o in outs]
    assert all(a < b for a, b in zip(lengths, lengths[1:])) and lengths[-1] == 12  # no event repeats
    assert all(o["meta_info"]["finish_reason"] is None for o in outs[:-1])
    plain = httpx.post(f"{plain_url}/generate", json={**body, "stream": False}, timeout=300).json()
    _same_sample(outs[-1], plain)


def test_prompt_scoring_without_generation(seer_url, plain_url):
    body = {"input_ids": PROMPT_IDS, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
            "logprob_start_len": 0}
    s = httpx.post(f"{seer_url}/generate", json=body, timeout=300)
    p = httpx.post(f"{plain_url}/generate", json=body, timeout=300)
    assert s.status_code == 200, s.text
    assert len(s.json()["meta_info"]["input_token_logprobs"]) == len(PROMPT_IDS)
    _same_sample(s.json(), p.json())


def test_grpo_per_sample_traffic_forms_groups(seer_url):
    """slime's and AReaL's pattern (one request per sample, no rid) and veRL's (a fresh rid per sample),
    with the siblings of four prompts interleaved: each prompt's G samples run as one group."""
    prompts, g = [[5, 9, 11 + p, 2] for p in range(4)], 4

    async def send() -> list[tuple[list[int], dict]]:
        bodies = [{"input_ids": ids, "sampling_params": {"temperature": 1.0, "max_new_tokens": 16},
                   "return_logprob": True, **({"rid": uuid.uuid4().hex} if k % 2 else {})}
                  for ids in prompts for k in range(g)]
        random.Random(0).shuffle(bodies)
        async with httpx.AsyncClient(base_url=seer_url, timeout=300) as c:
            answers = await asyncio.gather(*(c.post("/generate", json=b) for b in bodies))
        assert all(a.status_code == 200 for a in answers)
        return [(b["input_ids"], a.json()) for b, a in zip(bodies, answers)]

    results = asyncio.run(send())
    by_prompt: dict[tuple, list[dict]] = {}
    for ids, out in results:
        by_prompt.setdefault(tuple(ids), []).append(out["meta_info"])
    for metas in by_prompt.values():
        assert len({m["group_id"] for m in metas}) == 1 and all(m["group_size"] == g for m in metas)
    assert len({metas[0]["group_id"] for metas in by_prompt.values()}) == len(prompts)
    outputs = [tuple(out["output_ids"]) for _, out in results]
    assert len(set(outputs)) == len(outputs)  # siblings draw independently
    metrics = httpx.get(f"{seer_url}/metrics", timeout=30).text
    grouped = [line for line in metrics.splitlines() if line.startswith("seer_generate_grouped_samples_total")]
    assert grouped and float(grouped[0].split()[-1]) >= len(outputs)


def test_a_late_sibling_joins_its_running_group(seer_url):
    body = {"input_ids": [6, 6, 1], "sampling_params": {"max_new_tokens": 800, "ignore_eos": True}}

    async def send():
        async with httpx.AsyncClient(base_url=seer_url, timeout=300) as c:
            early = [asyncio.create_task(c.post("/generate", json=body)) for _ in range(2)]
            while not sum(i["inflight_chunks"] for i in (await c.get("/instances")).json()["instances"]):
                await asyncio.sleep(0.02)  # the group was formed and runs
            late = [asyncio.create_task(c.post("/generate", json=body)) for _ in range(2)]
            return await asyncio.gather(*early, *late)

    metas = [a.json()["meta_info"] for a in asyncio.run(send())]
    assert len({m["group_id"] for m in metas}) == 1 and all(m["group_size"] == 4 for m in metas)


def test_per_sample_siblings_draft_from_their_group(seer_url):
    """Group drafts reach per-sample traffic: siblings sent one request each, after the first is well
    ahead, join its group and take its tokens as drafts (temperature 0, so their tokens are the same).
    The speculative counts in ``meta_info`` are SGLang's: verify steps and accepted draft tokens."""
    new_tokens = 480  # the lead's last third outlasts the grouping window by far on any machine
    body = {"input_ids": [8, 21, 5, 34], "return_logprob": False,
            "sampling_params": {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}}

    async def send():
        async with httpx.AsyncClient(base_url=seer_url, timeout=300) as c:
            async with c.stream("POST", "/generate", json={**body, "stream": True}) as first:
                lead = None
                late = []
                async for line in first.aiter_lines():
                    if not line.startswith("data:") or line.endswith("[DONE]"):
                        continue
                    lead = json.loads(line[5:])
                    if not late and len(lead["output_ids"]) >= new_tokens * 2 // 3:
                        late = [asyncio.create_task(c.post("/generate", json=body)) for _ in range(3)]
            return lead, [(await t).json() for t in late]

    lead, late = asyncio.run(send())
    assert late, "the first sibling finished before it was two thirds through"
    assert len({o["meta_info"]["group_id"] for o in [lead, *late]}) == 1
    assert all(o["output_ids"] == lead["output_ids"] for o in late)

    def tokens_per_step(outs: list[dict]) -> float:
        steps = sum(o["meta_info"].get("spec_verify_ct", 0) for o in outs)
        return sum(len(o["output_ids"]) - 1 for o in outs) / max(1, steps)

    assert all(o["meta_info"]["spec_verify_ct"] > 0 and o["meta_info"]["spec_accept_token_num"] > 0 for o in late)
    # The lead drafts from its own tokens only; the late siblings verify its tokens two thirds of the way.
    # Pooled over the siblings: each instance's adaptive budget sets draft lengths from its measured step
    # costs, which vary with the machine's load (pooled: 1.57 in one fresh-clone run, above 2 in others;
    # the lead: 1.0).
    assert tokens_per_step(late) > 1.3 and tokens_per_step(late) > tokens_per_step([lead]) + 0.3, \
        ([tokens_per_step([o]) for o in late], tokens_per_step([lead]))


def test_named_groups_form_when_complete(seer_url):
    """A trainer that knows its groups names them; the group forms when its last sample arrives."""
    async def send():
        async with httpx.AsyncClient(base_url=seer_url, timeout=300) as c:
            return await asyncio.gather(*(c.post(
                "/generate", json={"input_ids": [3, 3, 3], "sampling_params": {"max_new_tokens": 4}},
                headers={"X-Seer-Group": "prompt-7", "X-Seer-Group-Size": "3"}) for _ in range(3)))

    answers = asyncio.run(send())
    assert len({a.json()["meta_info"]["group_id"] for a in answers}) == 1
    bad = httpx.post(f"{seer_url}/generate", json={"input_ids": [3], "seer_group_size": 0}, timeout=30)
    assert bad.status_code == 400 and "seer_group_size" in bad.json()["error"]["message"]


def test_seeded_requests_reproduce_and_siblings_differ(seer_url):
    body = {"rid": "seeded-1", "input_ids": PROMPT_IDS,
            "sampling_params": {"temperature": 1.0, "max_new_tokens": 16, "sampling_seed": 7}}
    first = httpx.post(f"{seer_url}/generate", json=body, timeout=300).json()
    again = httpx.post(f"{seer_url}/generate", json=body, timeout=300).json()
    assert first["output_ids"] == again["output_ids"]
    # one sampling_seed for a whole n=4 request: SGLang would draw four identical samples; seer's differ
    many = httpx.post(f"{seer_url}/generate", timeout=300, json={
        "input_ids": PROMPT_IDS, "sampling_params": {"temperature": 1.0, "max_new_tokens": 16, "n": 4,
                                                     "sampling_seed": 7}}).json()
    assert len({tuple(m["output_ids"]) for m in many}) == 4


def test_a_trajectorys_next_turn_goes_where_its_last_turn_ran(seer_url):
    """An agent loop's turns, named by ``session_id``, sgl-model-gateway's routing-key header, rids with
    a turn number, or one rid for every turn: each first turn runs on instance 1 while instance 0 is
    busy; each next turn, sent once both are idle, goes back to instance 1, where its prefix is cached.
    An unnamed turn goes where an idle tie sends it, instance 0: without the trajectory, so would they."""
    namings = {"session": ({"session_id": "agent-a"}, {"session_id": "agent-a"}, {}),
               "header": ({}, {}, {"X-SMG-Routing-Key": "agent-b"}),
               "rid_turns": ({"rid": "agent-c-0"}, {"rid": "agent-c-1"}, {}),
               "same_rid": ({"rid": "agent-d"}, {"rid": "agent-d"}, {}),
               "unnamed": ({}, {}, {})}

    def turn(ids: list[int], named: dict, headers: dict) -> tuple[dict, list[float]]:
        before = [_counter(seer_url, "seer_chunks", instance=str(i)) for i in (0, 1)]
        r = httpx.post(f"{seer_url}/generate", headers=headers, timeout=300, json={
            "input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": 8}, **named})
        assert r.status_code == 200, r.text
        return r.json(), [_counter(seer_url, "seer_chunks", instance=str(i)) - b for i, b in zip((0, 1), before)]

    # the long sample runs as one chunk, so that instance 0 stays busy (and returns no chunk) meanwhile
    scheduler = httpx.get(f"{seer_url}/scheduler", timeout=10).json()
    assert httpx.post(f"{seer_url}/scheduler", json={**scheduler, "chunk_size": 1500}, timeout=30).status_code == 200
    try:
        _turns_follow_their_trajectory(seer_url, namings, turn)
    finally:
        assert httpx.post(f"{seer_url}/scheduler", json=scheduler, timeout=30).status_code == 200


def _turns_follow_their_trajectory(seer_url, namings, turn) -> None:
    busy = BackgroundRollout(seer_url, {"prompts": [{"input_ids": [4, 4, 2]}], "n": 1, "max_tokens": 1500,
                                        "ignore_eos": True, "temperature": 0})
    try:
        def loads():
            return [i["inflight_chunks"] for i in httpx.get(f"{seer_url}/instances", timeout=10).json()["instances"]]
        wait_until(lambda: loads() == [1, 0], 120, 0.02, "the long sample on instance 0")
        first = {}
        for k, (name, (named, _, headers)) in enumerate(namings.items()):
            ids = [30 + k, 7, 19, 5, 11]
            out, ran = turn(ids, named, headers)
            assert ran == [0, 1], (name, ran)
            first[name] = ids + out["output_ids"] + [12, 13]
        assert busy.running, "the long sample ended before the first turns did"
    finally:
        httpx.post(f"{seer_url}/abort_request", json={"abort_all": True}, timeout=30)
        busy.wait()
    for name, (_, named, headers) in namings.items():
        _, ran = turn(first[name], named, headers)
        assert ran == ([1, 0] if name == "unnamed" else [0, 1]), (name, ran)


def test_abort_by_the_trainers_rid(seer_url):
    async def run():
        async with httpx.AsyncClient(base_url=seer_url, timeout=300) as c:
            long = asyncio.create_task(c.post("/generate", json={
                "rid": "trainer-rid-1", "input_ids": PROMPT_IDS,
                "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}))
            await asyncio.sleep(1.0)
            aborted = await c.post("/abort_request", json={"rid": "trainer-rid-1"})
            return aborted, await long

    aborted, answer = asyncio.run(run())
    assert aborted.headers["x-seer-aborted-samples"] == "1"
    assert answer.status_code == 200
    meta = answer.json()["meta_info"]
    assert meta["id"] == "trainer-rid-1" and meta["finish_reason"]["type"] == "abort"


def test_fields_sglang_takes_are_taken_as_sglang_takes_them(seer_url, plain_url):
    """Empty media lists, null adapters, routing hints, a priority (which SGLang without priority
    scheduling leaves unused), cache namespaces (sent with every chunk): the answer is plain SGLang's,
    with ``prompt_token_ids`` where SGLang puts it."""
    before = httpx.get(f"{seer_url}/scheduler", timeout=30).json()
    extras = {"image_data": [], "video_data": [], "audio_data": None, "lora_path": None, "priority": 3,
              "data_parallel_rank": 0, "routed_dp_rank": 0, "extra_key": "tenant-a", "cache_salt": "salt-1",
              "return_routed_experts": False, "return_prompt_token_ids": True}
    body = {**_body(SLIME), **extras}
    try:
        assert httpx.post(f"{seer_url}/scheduler", json={"name": "context", "chunk_size": 8},
                          timeout=30).status_code == 200
        seer = httpx.post(f"{seer_url}/generate", json=body, timeout=300)
    finally:
        httpx.post(f"{seer_url}/scheduler", json=before, timeout=30)
    plain = httpx.post(f"{plain_url}/generate", json=body, timeout=300)
    assert seer.status_code == plain.status_code == 200, (seer.text, plain.text)
    got, want = seer.json(), plain.json()
    _same_sample(got, want)
    assert got["prompt_token_ids"] == want["prompt_token_ids"] == PROMPT_IDS
    meta = got["meta_info"]  # three chunks: SGLang's count is the prompt's, every chunk's context seer's own
    assert meta["cached_tokens"] <= meta["prompt_tokens"] and meta["seer_cached_context_tokens"] >= meta["cached_tokens"]


def test_token_ids_logprob_across_chunks_is_plain_sglangs(seer_url, plain_url):
    """veRL's and SGLang's adapters send ``token_ids_logprob``: those tokens' logprobs at every output
    position (and the prompt's, from ``logprob_start_len``), concatenated over chunks of 8."""
    before = httpx.get(f"{seer_url}/scheduler", timeout=30).json()
    body = {"input_ids": PROMPT_IDS, "return_logprob": True, "logprob_start_len": 0, "token_ids_logprob": [5, 17, 300],
            "sampling_params": {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}}
    try:
        assert httpx.post(f"{seer_url}/scheduler", json={"name": "context", "chunk_size": 8},
                          timeout=30).status_code == 200
        got = httpx.post(f"{seer_url}/generate", json=body, timeout=300).json()
    finally:
        httpx.post(f"{seer_url}/scheduler", json=before, timeout=30)
    want = httpx.post(f"{plain_url}/generate", json=body, timeout=300).json()
    assert got["output_ids"] == want["output_ids"]
    for key in ("output_token_ids_logprobs", "input_token_ids_logprobs"):
        g, w = got["meta_info"][key], want["meta_info"][key]
        assert len(g) == len(w) and len(g) > 0, key
        for gs, ws in zip(g, w):
            assert (gs is None) == (ws is None), key
            if ws is not None:
                assert [e[1] for e in gs] == [e[1] for e in ws], key
                assert all(abs(a[0] - b[0]) < 1e-3 for a, b in zip(gs, ws)), key
    bad = httpx.post(f"{seer_url}/generate", json={**body, "token_ids_logprob": [10 ** 7]}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "token_ids_logprob"


@pytest.mark.parametrize("body,field", [
    ({"input_ids": PROMPT_IDS, "return_logprobs": True}, "return_logprobs"),  # misspelt
    ({"input_ids": PROMPT_IDS, "sampling_params": {"min_p": 0.1}}, "min_p"),
    ({"input_ids": PROMPT_IDS, "sampling_params": {"regex": "a+"}}, "regex"),
    ({"text": "hi", "image_data": "file.png"}, "image_data"),  # the tiny model takes no images
    ({"input_ids": PROMPT_IDS, "return_routed_experts": True}, "return_routed_experts"),  # not enabled
    ({"input_ids": PROMPT_IDS, "return_hidden_states": True}, "return_hidden_states"),
    ({"input_ids": PROMPT_IDS, "sampling_params": {"max_new_tokens": 10 ** 6}}, "max_new_tokens"),
    ({"input_ids": [10 ** 7]}, "input_ids"),
    ({"input_ids": PROMPT_IDS, "sampling_params": {"temperature": -1}}, "temperature"),
    ({"sampling_params": {}}, "text"),
])
def test_what_seer_cannot_honour_is_a_400_naming_it(body, field, seer_url):
    r = httpx.post(f"{seer_url}/generate", json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert field in error["message"] or field in (error["param"] or "")
