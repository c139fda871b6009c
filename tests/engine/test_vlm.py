"""Image-conditioned rollout through chunks, on the local random Qwen2-VL (``tiny-vl``): a sample keeps
its images in every chunk on every instance, so its greedy tokens are plain SGLang's answer to the
unchunked request, in each form the trainers send it (slime: the templated text and ``image_data``;
AReaL and veRL: ``input_ids`` and ``image_data``, built and sent by their own clients; OpenAI chat:
image_url parts)."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

import areal_client
import verl_client
from conftest import chunked, chunks_returned, moved_rollout, png_data_url, seer_beside_plain, wait_until
from seer_sglang.models import prepare

CHUNK = 16
TOKENS = 48
QUESTION = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is in the picture {}?<|im_end|>\n" \
           "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    """(seer with 2 instances, a plain SGLang instance), both of the tiny Qwen2-VL."""
    model = str(prepare("tiny-vl"))
    logs = tmp_path_factory.mktemp("vlm")
    # --kv-pool file: a moved continuation's pages come from the pool (the tiny model's default is none)
    with seer_beside_plain(model, logs, ["--dtype", "float32"], ("--kv-pool", "file")) as (seer, plain):
        _scheduler(seer.url)
        yield seer.url, plain.url, model


def _scheduler(url: str, **settings) -> None:
    chunked(url, CHUNK, **settings)


def _generate(url: str, body: dict, tokens: int = TOKENS) -> dict:
    r = httpx.post(f"{url}/generate", json={**body, "sampling_params": {"max_new_tokens": tokens, "temperature": 0,
                                                                         "ignore_eos": True}}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_image_conditioned_tokens_over_chunks_and_instances_equal_plain_sglang(vlm):
    seer_url, plain_url, model = vlm
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = [QUESTION.format(i) for i in range(4)]
    images = [png_data_url(i) for i in range(4)]
    want = [_generate(plain_url, {"text": t, "image_data": [im]}) for t, im in zip(texts, images)]
    # the image conditions the tokens: another image, or none, gives others
    assert want[0]["output_ids"] != _generate(plain_url, {"text": texts[0], "image_data": [images[1]]})["output_ids"]
    assert want[0]["output_ids"] != _generate(plain_url, {"text": texts[0]})["output_ids"]
    assert want[0]["meta_info"]["prompt_tokens"] > len(tokenizer.encode(texts[0]))  # the image's tokens

    samples = moved_rollout(seer_url, {
        "prompts": [{"input_ids": tokenizer.encode(t), "image_data": [im]} for t, im in zip(texts, images)],
        "n": 2, "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True}, CHUNK)
    slime = _generate(seer_url, {"text": texts[1], "image_data": [images[1]]})
    areal = _generate(seer_url, {"input_ids": tokenizer.encode(texts[2]), "image_data": [images[2]]})
    batch = httpx.post(f"{seer_url}/generate", json={
        "text": texts[:2], "image_data": images[:2],
        "sampling_params": {"max_new_tokens": TOKENS, "temperature": 0, "ignore_eos": True}}, timeout=300).json()
    for s in samples:
        assert len(s["chunks"]) == 3 and s["output_ids"] == want[s["prompt_index"]]["output_ids"], s["prompt_index"]
    assert slime["output_ids"] == want[1]["output_ids"] and areal["output_ids"] == want[2]["output_ids"]
    assert slime["meta_info"]["prompt_tokens"] == want[1]["meta_info"]["prompt_tokens"]  # counted as SGLang counts
    assert [b["output_ids"] for b in batch] == [want[0]["output_ids"], want[1]["output_ids"]]


def test_chat_image_parts_and_seeded_sampling(vlm):
    seer_url, plain_url, _ = vlm
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": png_data_url(7)}},
                                             {"type": "text", "text": "Describe it."}]}]
    body = {"messages": messages, "max_tokens": 40, "temperature": 0}
    got = httpx.post(f"{seer_url}/v1/chat/completions", json=body, timeout=300)
    want = httpx.post(f"{plain_url}/v1/chat/completions", json=body, timeout=300)
    assert got.status_code == want.status_code == 200, got.text
    assert got.json()["choices"][0]["message"]["content"] == want.json()["choices"][0]["message"]["content"]
    # temperature 1, seeded: in chunks, a sample draws what it draws in one request
    seeded = {"text": QUESTION.format(9), "image_data": [png_data_url(9)],
              "sampling_params": {"max_new_tokens": TOKENS, "temperature": 1.0, "sampling_seed": 5, "ignore_eos": True}}
    chunked(seer_url, TOKENS + 1)
    try:
        whole = httpx.post(f"{seer_url}/generate", json=seeded, timeout=300).json()
    finally:
        _scheduler(seer_url)
    in_chunks = httpx.post(f"{seer_url}/generate", json=seeded, timeout=300).json()
    assert in_chunks["output_ids"] == whole["output_ids"] and len(whole["output_ids"]) == TOKENS


def test_a_moved_continuation_loads_its_image_kv_from_the_pool_keyed_by_the_image(vlm):
    """The pool's pages of an image prompt are keyed by the image: a continuation on the other instance
    loads them (and samples what one unchunked request samples), and the same text with another
    image finds none of them."""
    seer_url, plain_url, model = vlm
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(model).encode(QUESTION.format("kept in the pool " * 8))
    a, b = [i["url"] for i in httpx.get(f"{seer_url}/instances", timeout=10).json()["instances"]]
    first = _generate(a, {"input_ids": ids, "image_data": [png_data_url(21)]})
    context = ids + first["output_ids"]
    moved = _generate(b, {"input_ids": context, "image_data": [png_data_url(21)]})
    stored = (moved["meta_info"].get("cached_tokens_details") or {}).get("storage", 0)
    expanded = first["meta_info"]["prompt_tokens"] + TOKENS  # the context as the instance counts it
    assert stored >= expanded - 1 - 2 * 16, moved["meta_info"]  # every whole page but the last
    whole = _generate(plain_url, {"input_ids": ids, "image_data": [png_data_url(21)]}, 2 * TOKENS)
    assert first["output_ids"] + moved["output_ids"] == whole["output_ids"]
    other = _generate(b, {"input_ids": context, "image_data": [png_data_url(22)]})
    assert (other["meta_info"].get("cached_tokens_details") or {}).get("storage", 0) == 0, other["meta_info"]
    assert other["meta_info"]["cached_tokens"] < 16


def test_areals_client_sends_images_through_chunks_and_resumes_a_paused_image_sample(vlm):
    """AReaL's ``RemoteInfEngine`` with its ``SGLangBackend`` (``input_ids`` with the image placeholder,
    ``image_data``), on seer with chunks of 16: greedy tokens are plain SGLang's unchunked answer. Paused
    mid-sample (SGLang's abort mode), AReaL resends prompt + tokens so far with the same image, and the
    sample ends with the same tokens."""
    areal = areal_client.load()
    if areal is None:
        pytest.skip("AReaL is not installed (bash scripts/setup.sh installs it)")
    seer_url, plain_url, model = vlm
    from transformers import AutoTokenizer

    _, _, io_struct, cli_args = areal
    ids = AutoTokenizer.from_pretrained(model).encode(QUESTION.format("AReaL"))

    def request(image: str, tokens: int):
        gconfig = cli_args.GenerationHyperparameters(greedy=True, max_new_tokens=tokens, ignore_eos=True)
        return io_struct.ModelRequest(input_ids=list(ids), image_data=[image], gconfig=gconfig)

    engine, reasons = areal_client.engine(areal, seer_url)
    got = asyncio.run(engine.agenerate(request(png_data_url(31), TOKENS)))
    want = _generate(plain_url, {"input_ids": ids, "image_data": [png_data_url(31)]})
    assert got.output_tokens == want["output_ids"] and reasons == ["length"]
    other = _generate(plain_url, {"input_ids": ids, "image_data": [png_data_url(32)]})
    assert got.output_tokens != other["output_ids"]  # the image conditions them

    n = 12 * CHUNK
    want = _generate(plain_url, {"input_ids": ids, "image_data": [png_data_url(33)]}, n)
    reasons.clear()
    box: dict = {}
    paused = request(png_data_url(33), n)
    thread = threading.Thread(target=lambda: box.update(out=asyncio.run(engine.agenerate(paused))))
    thread.start()
    before = chunks_returned(seer_url)
    wait_until(lambda: chunks_returned(seer_url) >= before + 2, 120, 0.05, "two chunks of the sample")
    assert areal_client.pause_and_continue(engine, reasons) == ["abort"], "the pause did not answer the sample"
    thread.join(600)
    assert reasons[-1] == "length", reasons  # resent after the pause
    assert box["out"].output_tokens == want["output_ids"]


def test_verls_client_sends_images_through_chunks(vlm):
    """veRL's ``HttpServerAdapter.generate(input_ids=..., image_data=...)`` on seer with chunks of 16:
    greedy tokens are plain SGLang's unchunked answer."""
    verl = verl_client.load()
    if verl is None:
        pytest.skip("verl is not installed (bash scripts/setup.sh installs it)")
    seer_url, plain_url, model = vlm
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(model).encode(QUESTION.format("veRL"))
    adapter = verl_client.adapter(verl, seer_url, model)
    got = adapter.generate(input_ids=ids, image_data=[png_data_url(41)],
                           sampling_params={"max_new_tokens": TOKENS, "temperature": 0, "ignore_eos": True})
    want = _generate(plain_url, {"input_ids": ids, "image_data": [png_data_url(41)]})
    assert got["output_ids"] == want["output_ids"]
