"""OpenAI-compatible endpoints against real SGLang instances (tiny model, CPU)."""

import httpx
import openai
import pytest

PROMPT = "the sum of 12 and 30 is"


@pytest.fixture(scope="module")
def client(seer_url):
    return openai.OpenAI(base_url=f"{seer_url}/v1", api_key="none", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def test_models_lists_the_served_model(client, tiny_model):
    models = client.models.list().data
    assert len(models) == 1 and models[0].id == tiny_model


def test_completions_n4_is_one_group(client, model, seer_url):
    out = client.completions.create(model=model, prompt=PROMPT, n=4, max_tokens=12, temperature=1.0, seed=3)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    assert all(c.finish_reason in ("length", "stop") for c in out.choices)
    assert 0 < out.usage.completion_tokens <= 4 * 12
    assert len({c.text for c in out.choices}) > 1  # siblings sample independently
    again = client.completions.create(model=model, prompt=PROMPT, n=4, max_tokens=12, temperature=1.0, seed=3)
    assert [c.text for c in again.choices] == [c.text for c in out.choices]  # seeded = reproducible
    versions = [(r.model_extra or {})["metadata"]["weight_version"] for r in (out, again)]
    assert versions[0] and versions[0] == versions[1]


def test_chat_n4(client, model):
    out = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "What is 2+3?"}],
                                         n=4, max_tokens=10, temperature=0.8)
    assert len(out.choices) == 4
    assert all(c.message.role == "assistant" and isinstance(c.message.content, str) for c in out.choices)
    assert out.usage.prompt_tokens > 0
    version = (out.model_extra or {})["metadata"]["weight_version"]  # SGLang's field: the sampling weights
    assert isinstance(version, str) and version


def test_chat_streaming_n4_matches_non_streaming_at_temperature_0(client, model):
    messages = [{"role": "user", "content": "Count: 1, 2, 3"}]
    stream = client.chat.completions.create(model=model, messages=messages, n=4, max_tokens=16, temperature=0,
                                            stream=True)
    texts, finishes = {}, {}
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    assert sorted(texts) == [0, 1, 2, 3] and sorted(finishes) == [0, 1, 2, 3]
    full = client.chat.completions.create(model=model, messages=messages, n=1, max_tokens=16, temperature=0)
    assert all(t == full.choices[0].message.content for t in texts.values())


def test_completions_streaming_n4(client, model):
    stream = client.completions.create(model=model, prompt=PROMPT, n=4, max_tokens=8, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    texts, usage = {}, None
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
        usage = chunk.usage or usage
    assert sorted(texts) == [0, 1, 2, 3] and len(set(texts.values())) == 1
    assert usage is not None and usage.completion_tokens == 32


def test_temperature_0_tokens_equal_plain_sglang(seer_url, plain_url, tiny_model):
    """Same model, same inputs: seer's rollout API and a plain SGLang server give identical tokens."""
    prompts = [PROMPT, "apples and oranges: how many", "Let x be 5. then"]
    with httpx.Client(timeout=300) as http:
        seer = http.post(f"{seer_url}/v1/rollout", json={"prompts": prompts, "n": 4, "max_tokens": 24,
                                                          "temperature": 0}).json()
        for i, prompt in enumerate(prompts):
            plain = http.post(f"{plain_url}/generate", json={"text": prompt, "sampling_params": {
                "max_new_tokens": 24, "temperature": 0}}).json()
            ours = [s for s in seer["samples"] if s["prompt_index"] == i]
            assert len(ours) == 4
            for s in ours:
                assert s["output_ids"] == plain["output_ids"]
            # and through the OpenAI surface of both servers
            plain_text = http.post(f"{plain_url}/v1/completions", json={
                "model": tiny_model, "prompt": prompt, "max_tokens": 24, "temperature": 0}).json()
            seer_text = http.post(f"{seer_url}/v1/completions", json={
                "prompt": prompt, "max_tokens": 24, "temperature": 0}).json()
            assert seer_text["choices"][0]["text"] == plain_text["choices"][0]["text"]


def test_logprobs_and_stop(client, model):
    out = client.completions.create(model=model, prompt=PROMPT, max_tokens=10, temperature=0, logprobs=2)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == 10
    assert all(v <= 0 for v in lp.token_logprobs)
    assert all(len(t) <= 2 for t in lp.top_logprobs)
    text = out.choices[0].text
    stop = text[3:6]
    assert stop.strip(), text
    cut = client.completions.create(model=model, prompt=PROMPT, max_tokens=10, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[:text.find(stop)]


def test_any_model_name_is_the_served_model_as_in_sglang(seer_url, plain_url):
    """Clients written for SGLang send ``model: "default"`` (or their own label); SGLang serves its model
    whatever the name, and so does seer. ``<model>:<adapter>`` asks for a LoRA adapter: refused by name."""
    body = {"messages": [{"role": "user", "content": "What is 2+3?"}], "max_tokens": 8, "temperature": 0}
    answers = {}
    for url in (seer_url, plain_url):
        r = httpx.post(f"{url}/v1/chat/completions", json={**body, "model": "default"}, timeout=300)
        assert r.status_code == 200, r.text
        answers[url] = r.json()["choices"][0]["message"]["content"]
    assert answers[seer_url] == answers[plain_url]
    r = httpx.post(f"{seer_url}/v1/chat/completions", json={**body, "model": "default:my-adapter"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "lora_not_enabled", r.text
    assert r.json()["error"]["param"] == "model"
    plain = httpx.post(f"{plain_url}/v1/chat/completions", json={**body, "model": "default:my-adapter"}, timeout=60)
    assert 400 <= plain.status_code < 500  # SGLang refuses it too (no adapter loaded)
