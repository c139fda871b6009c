"""SGLang's native ``POST /generate``, as trainers call it: one request per sample (or a batch, or
``n`` > 1), SGLang's body and SGLang's answer. Samples with the same prompt and settings that arrive
close together run as one group (``frontend/grouping.py``)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from ...core.request import SampleState
from ..errors import APIError
from ..protocol import SLOField
from ..native import NativeRequest, group_key, parse_generate, response
from ..state import Frontend
from ...wire import GROUP_FIELD, GROUP_HEADER, GROUP_SIZE_FIELD, GROUP_SIZE_HEADER, ROUTING_KEY_HEADER
from .common import frontend, hold_until_first_token, json_answer, json_body, sse, unless_disconnected

router = APIRouter()


def _group_hint(request: Request, body: Any) -> tuple[str | None, int | None]:
    key = size = None
    if isinstance(body, dict):
        key, size = body.pop(GROUP_FIELD, None), body.pop(GROUP_SIZE_FIELD, None)
    key = key if key is not None else request.headers.get(GROUP_HEADER)
    size = size if size is not None else request.headers.get(GROUP_SIZE_HEADER)
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 256):
        raise APIError("seer_group must be a string of 1 to 256 characters", param=GROUP_FIELD)
    if size is not None:
        try:
            size = int(size)
        except (TypeError, ValueError):
            size = 0
        if not 1 <= size <= 1024:
            raise APIError("seer_group_size must be an integer in [1, 1024]", param=GROUP_SIZE_FIELD)
    return key, size


def _slo(body: Any) -> Any:
    """seer's ``slo`` object (dropped before SGLang's parse, which does not know it)."""
    raw = body.pop("slo", None) if isinstance(body, dict) else None
    if raw is None:
        return None
    try:
        return SLOField.model_validate(raw).to_slo()
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in ("slo", *first.get("loc", ())))
        raise APIError(f"{where}: {first.get('msg')}", param=where) from None


@router.api_route("/generate", methods=["POST", "PUT"])
async def generate(request: Request):
    fe = frontend(request)
    body = await json_body(request)
    explicit, size = _group_hint(request, body)
    slo = _slo(body)
    fe.check_available()
    # The sample count is checked before any sample is built, and so before any joins a group: a
    # refused request leaves nothing behind.
    req = parse_generate(body, encode=fe.tokenizer.encode_text, check_prompt=fe.check_prompt,
                         check_samples=fe.check_samples, vocab_size=fe.tokenizer.vocab_size,
                         context_length=fe.model.context_length, slo=slo,
                         routing_key=request.headers.get(ROUTING_KEY_HEADER))
    fe.check_rids(req.samples)
    fe.check_native(req.samples)
    if slo is not None:  # no wait for siblings from other calls: the request's own samples form its group
        explicit, size = f"slo-{uuid.uuid4().hex}", len(req.samples)
    if req.stream:
        return await _stream(fe, req, explicit, size)
    loop = asyncio.get_running_loop()
    finished = [loop.create_future() for _ in req.samples]
    for native, fut in zip(req.samples, finished):
        native.on_done = lambda s, f=fut: f.done() or f.set_result(s)
    async def run() -> None:
        await fe.grouper.join([(group_key(n, explicit), n) for n in req.samples], size)
        await asyncio.gather(*(asyncio.shield(f) for f in finished))

    try:
        await unless_disconnected(request, run())
    finally:  # answered, refused, or the client went away: what still runs is aborted
        _release(fe, req)
    fe.raise_if_failed(n.sample for n in req.samples if n.sample is not None)
    outs = [response(n, req, fe.tokenizer, fe.tokenizer.sample_text(n.sample)) for n in req.samples]
    return json_answer(outs[0] if req.single else outs)


def _release(fe: Frontend, req: NativeRequest) -> None:
    """The call is over (answered, or its client went away): abort what still runs, forget the rids."""
    for native in req.samples:
        if native.sample is None:
            native.abandoned = True
        elif not native.sample.done:
            fe.engine.abort_sample(native.sample)
    fe.forget_samples(req.samples)


async def _stream(fe: Frontend, req: NativeRequest, explicit: str | None, size: int | None) -> StreamingResponse:
    """SGLang's stream: cumulative text and ids per event (with ``index`` in a batch), then [DONE].

    The samples join their groups before the stream begins, so what refuses them (no healthy
    instance) is the request's HTTP error; an SLO request waits for its first token first
    (``hold_until_first_token``)."""
    queue: asyncio.Queue = asyncio.Queue()
    for native in req.samples:
        native.on_tokens = lambda _s, _ids, n=native: queue.put_nowait(("tokens", n))
        native.on_done = lambda _s, n=native: queue.put_nowait(("done", n))
    held: list[tuple[str, Any]] = []
    try:
        await fe.grouper.join([(group_key(n, explicit), n) for n in req.samples], size)
        if any(n.sample.params.slo is not None for n in req.samples):
            held = await hold_until_first_token(queue, len(req.samples))
            if all(n.sample.state == SampleState.FAILED for n in req.samples):
                fe.raise_if_failed(n.sample for n in req.samples)
    except BaseException:  # refused, or the client went away before the stream began
        _release(fe, req)
        raise
    return StreamingResponse(_events(fe, req, queue, held), media_type="text/event-stream")


async def _events(fe: Frontend, req: NativeRequest, queue: asyncio.Queue,
                  held: list[tuple[str, Any]]) -> AsyncIterator[bytes]:
    try:
        remaining = len(req.samples)
        sent: dict[int, int] = {}  # tokens already streamed, per sample
        while remaining:
            kind, native = held.pop(0) if held else await queue.get()
            sample = native.sample
            if kind == "tokens":
                # Events are cumulative: one queued behind newer tokens, or before the sample's final
                # event (which carries the finish reason), would repeat what the client has.
                if sample.done or sent.get(native.position) == len(sample.output_ids):
                    continue
                text = fe.tokenizer.decode(sample.output_ids, sample.params.skip_special_tokens,
                                           sample.params.spaces_between_special_tokens)
                if text.endswith("\ufffd"):  # an incomplete character: wait for the next token
                    continue
                out = response(native, req, fe.tokenizer, text)
                sent[native.position] = len(sample.output_ids)
            else:
                remaining -= 1
                if sample.state == SampleState.FAILED:
                    yield sse({"error": {"message": sample.error, "type": "invalid_request_error"
                                         if sample.error_status < 500 else "server_error",
                                         "code": sample.error_status}})
                    continue
                out = response(native, req, fe.tokenizer, fe.tokenizer.sample_text(sample))
            if not req.single:
                out["index"] = native.position
            yield sse(out)
        yield b"data: [DONE]\n\n"
    finally:
        _release(fe, req)
