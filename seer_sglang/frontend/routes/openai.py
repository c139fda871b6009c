"""OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``: the n choices of one request
form one prompt group."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, AsyncIterator, Callable

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ...core.request import Group, Sample, SampleState, SamplingParams
from ..errors import APIError
from ..protocol import ChatCompletionRequest, CompletionRequest
from ..state import Frontend
from ..tokenizer import TextStreamer
from .common import frontend, hold_until_first_token, json_answer, run_groups, sse

router = APIRouter()


def _refuse_unhonoured(req) -> None:
    """A sampling field seer cannot apply exactly is refused by name, before any work is done."""
    refused = req.refused_field()
    if refused is not None:
        name, why = refused
        raise APIError(f"{name} is not supported by seer_sglang ({why}); leave it unset", param=name,
                       code="unsupported_parameter")


def _params(fe: Frontend, req, max_tokens: int, logprobs: bool, top_logprobs: int) -> SamplingParams:
    return req.sampling_params(max_tokens, fe.tokenizer.vocab_size, skip_special_tokens=req.skip_special_tokens,
                               logprobs=logprobs, top_logprobs=top_logprobs)


def _usage(groups: list[Group]) -> dict[str, int]:
    prompt = sum(len(g.prompt_ids) for g in groups)
    completion = sum(s.generated for g in groups for s in g.samples)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _choices(groups: list[Group]) -> list[tuple[int, Sample]]:
    """OpenAI numbering: choice index = prompt index * n + sample index."""
    out, i = [], 0
    for group in groups:
        for sample in group.samples:
            out.append((i, sample))
            i += 1
    return out


def _metadata(groups: list[Group]) -> dict[str, Any]:
    """SGLang's ``metadata`` of an OpenAI response: the weight version of the first choice (and its
    per-token versions when it ran on several)."""
    first = groups[0].samples[0]
    meta: dict[str, Any] = {"weight_version": first.weight_version}
    if len(first.token_versions) > 1:
        meta["weight_versions"] = [{"version": v, "start": a, "end": b} for v, a, b in first.token_versions]
    return meta


def _finish(sample: Sample) -> str:
    return sample.finish_reason if sample.finish_reason in ("stop", "length") else (sample.finish_reason or "stop")


async def _run(fe: Frontend, request: Request, groups: list[Group]) -> None:
    await run_groups(fe, request, groups)
    fe.raise_if_failed(s for g in groups for s in g.samples)


async def _stream(fe: Frontend, groups: list[Group], make_chunk: Callable[[int, str, str | None], dict],
                  first_chunks: list[dict], usage_chunk: Callable[[], dict] | None) -> StreamingResponse:
    """Streams text deltas per choice as tokens arrive; one final chunk per choice with its finish reason.

    The groups are submitted before the stream begins, so a request refused at once (the server
    full, no healthy instance) gets its HTTP error; an SLO request waits for its first token first
    (``hold_until_first_token``)."""
    queue: asyncio.Queue = asyncio.Queue()
    choices = _choices(groups)
    for _, sample in choices:
        sample.on_tokens = lambda s, _ids: queue.put_nowait(("tokens", s))
        sample.on_done = lambda s: queue.put_nowait(("done", s))
    fe.submit(groups)
    held: list[tuple[str, Any]] = []
    if any(s.params.slo is not None for _, s in choices):
        try:
            held = await hold_until_first_token(queue, len(choices))
        except BaseException:  # the client went away before the first token
            _abort(fe, groups)
            raise
        if all(s.state == SampleState.FAILED for _, s in choices):
            fe.raise_if_failed(s for _, s in choices)
    return StreamingResponse(_events(fe, groups, queue, held, make_chunk, first_chunks, usage_chunk),
                             media_type="text/event-stream")


def _abort(fe: Frontend, groups: list[Group]) -> None:
    for group in groups:
        if not group.done:
            fe.engine.abort_group(group.group_id)


async def _events(fe: Frontend, groups: list[Group], queue: asyncio.Queue, held: list[tuple[str, Any]],
                  make_chunk: Callable[[int, str, str | None], dict], first_chunks: list[dict],
                  usage_chunk: Callable[[], dict] | None) -> AsyncIterator[bytes]:
    choices = _choices(groups)
    streamers = {sample.rid: (index, TextStreamer(fe.tokenizer, sample.params.stop, sample.params.skip_special_tokens))
                 for index, sample in choices}
    remaining = len(choices)
    try:
        for chunk in first_chunks:
            yield sse(chunk)
        while remaining:
            kind, sample = held.pop(0) if held else await queue.get()
            index, streamer = streamers[sample.rid]
            if kind == "tokens":
                delta = streamer.delta(sample.output_ids)
                if delta:
                    yield sse(make_chunk(index, delta, None))
            else:
                remaining -= 1
                if sample.error:
                    yield sse({"error": {"message": sample.error, "type": "server_error", "code": sample.error_status}})
                    continue
                delta = streamer.final(fe.tokenizer.sample_text(sample))
                yield sse(make_chunk(index, delta, _finish(sample)))
        if usage_chunk is not None:
            yield sse(usage_chunk())
        yield b"data: [DONE]\n\n"
    finally:  # the client went away mid-stream: free the work
        _abort(fe, groups)


@router.post("/v1/completions")
async def completions(req: CompletionRequest, request: Request):
    fe = frontend(request)
    adapter = fe.check_model(req.model, req.lora_path)
    fe.check_available()
    _refuse_unhonoured(req)
    prompts = req.prompt
    if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    if not prompts:
        raise APIError("prompt must not be empty", param="prompt")
    fe.check_samples(len(prompts) * req.n)  # before any prompt is encoded or any sample built
    max_tokens = req.max_tokens or 16
    params = _params(fe, req, max_tokens, req.logprobs is not None, req.logprobs or 0)
    groups = []
    for i, prompt in enumerate(prompts):
        ids = fe.tokenizer.encode_text(prompt) if isinstance(prompt, str) else list(prompt)
        fe.check_prompt(ids, max_tokens)
        gid = fe.new_group_id(req.group_id, f"-{i}" if len(prompts) > 1 else "")
        groups.append(fe.make_group(ids, req.n, params, gid, position=i, requested_id=req.group_id,
                                    lora_path=adapter))
    rid, created, model = f"cmpl-{uuid.uuid4().hex}", int(time.time()), fe.model.served_name

    if req.stream:
        def chunk(index: int, text: str, finish: str | None) -> dict:
            return {"id": rid, "object": "text_completion", "created": created, "model": model,
                    "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish}]}

        usage = None
        if req.stream_options and req.stream_options.include_usage:
            usage = lambda: {"id": rid, "object": "text_completion", "created": created, "model": model,
                             "choices": [], "usage": _usage(groups)}
        return await _stream(fe, groups, chunk, [], usage)

    await _run(fe, request, groups)
    choices = []
    for index, sample in _choices(groups):
        text = fe.tokenizer.sample_text(sample)
        choices.append({"index": index, "text": text, "finish_reason": _finish(sample),
                        "logprobs": _completion_logprobs(fe, sample) if sample.params.logprobs else None})
    return json_answer({"id": rid, "object": "text_completion", "created": created, "model": model,
                         "choices": choices, "usage": _usage(groups), "metadata": _metadata(groups)})


def _completion_logprobs(fe: Frontend, sample: Sample) -> dict[str, Any]:
    tokens = [fe.tokenizer.token_str(t) for t in sample.output_ids]
    offsets, pos = [], 0
    for tok in tokens:
        offsets.append(pos)
        pos += len(tok)
    top = None
    if sample.params.top_logprobs:
        top = [{fe.tokenizer.token_str(t): lp for t, lp in step} for step in sample.top_logprobs]
    return {"tokens": tokens, "token_logprobs": sample.logprobs, "top_logprobs": top, "text_offset": offsets}


def _chat_logprobs(fe: Frontend, sample: Sample) -> dict[str, Any]:
    content = []
    for i, (tid, lp) in enumerate(zip(sample.output_ids, sample.logprobs)):
        tok = fe.tokenizer.token_str(tid)
        entry = {"token": tok, "logprob": lp, "bytes": list(tok.encode()), "top_logprobs": []}
        if sample.params.top_logprobs and i < len(sample.top_logprobs):
            entry["top_logprobs"] = [
                {"token": fe.tokenizer.token_str(t), "logprob": v, "bytes": list(fe.tokenizer.token_str(t).encode())}
                for t, v in sample.top_logprobs[i]
            ]
        content.append(entry)
    return {"content": content}


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, request: Request):
    fe = frontend(request)
    adapter = fe.check_model(req.model, req.lora_path)
    fe.check_available()
    _refuse_unhonoured(req)
    fe.check_samples(req.n)
    ids = fe.encode_messages(req.messages)
    max_tokens = req.max_completion_tokens or req.max_tokens or max(1, fe.model.context_length - len(ids))
    fe.check_prompt(ids, max_tokens, param="messages")
    params = _params(fe, req, max_tokens, req.logprobs, req.top_logprobs or 0)
    media = fe.media_of(req.messages)
    fe.check_media(media)
    groups = [fe.make_group(ids, req.n, params, fe.new_group_id(req.group_id), position=0,
                            requested_id=req.group_id, lora_path=adapter, media=media)]
    rid, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), fe.model.served_name

    if req.stream:
        def chunk(index: int, text: str, finish: str | None) -> dict:
            delta = {"content": text} if text else {}
            return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        first = [{"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                  "choices": [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                               "finish_reason": None}]} for i in range(req.n)]
        usage = None
        if req.stream_options and req.stream_options.include_usage:
            usage = lambda: {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                             "choices": [], "usage": _usage(groups)}
        return await _stream(fe, groups, chunk, first, usage)

    await _run(fe, request, groups)
    choices = []
    for index, sample in _choices(groups):
        choices.append({"index": index,
                        "message": {"role": "assistant", "content": fe.tokenizer.sample_text(sample)},
                        "logprobs": _chat_logprobs(fe, sample) if sample.params.logprobs else None,
                        "finish_reason": _finish(sample)})
    return json_answer({"id": rid, "object": "chat.completion", "created": created, "model": model,
                         "choices": choices, "usage": _usage(groups), "metadata": _metadata(groups)})


@router.get("/v1/models")
async def models(request: Request):
    fe = frontend(request)
    return {"object": "list", "data": [{"id": fe.model.served_name, "object": "model", "created": 0,
                                        "owned_by": "seer_sglang", "root": fe.model.model_path,
                                        "max_model_len": fe.model.context_length}]}
