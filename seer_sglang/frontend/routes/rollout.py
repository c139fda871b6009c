"""``POST /v1/rollout``: the batch API for RL trainers.

Each prompt becomes one group of n samples. Every sample comes back with its token ids, text,
per-token logprobs, finish reason, timing and chunks. With ``stream: true`` each finished sample is
one NDJSON line as soon as it finishes, then a summary line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from typing import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ...core.accounting import rollout_sources, spec_totals
from ...core.request import Group, Sample
from ...core.slo import attainment
from ..errors import APIError
from ..protocol import RolloutPrompt, RolloutRequest
from ..state import Frontend
from .common import json_answer, run_groups

router = APIRouter()


def _build_groups(fe: Frontend, req: RolloutRequest) -> tuple[list[Group], dict[str, int]]:
    # counted from the body before any prompt is encoded or any sample built
    fe.check_samples(sum((p.n if isinstance(p, RolloutPrompt) and p.n else req.n) for p in req.prompts))
    groups, prompt_index = [], {}
    adapter = fe.check_model(req.model, req.lora_path)
    fe.check_routed_experts(req.return_routed_experts)
    for i, raw in enumerate(req.prompts):
        prompt = RolloutPrompt.model_construct(text=raw) if isinstance(raw, str) else raw  # checked below
        given = [k for k in ("text", "messages", "input_ids") if getattr(prompt, k) is not None]
        if len(given) != 1:
            raise APIError(f"prompts[{i}] needs exactly one of text, messages, input_ids (got {given or 'none'})",
                           param=f"prompts.{i}")
        if prompt.text is not None:
            ids = fe.tokenizer.encode_text(prompt.text)
        elif prompt.messages is not None:
            ids = fe.encode_messages(prompt.messages, param=f"prompts.{i}.messages")
        else:
            ids = list(prompt.input_ids)
        fe.check_prompt(ids, req.max_tokens, param=f"prompts.{i}")
        media = fe.media_of(prompt.messages, prompt.image_data, prompt.video_data)
        fe.check_media(media)
        params = req.sampling_params(req.max_tokens, fe.tokenizer.vocab_size, logprobs=req.logprobs,
                                     top_logprobs=req.top_logprobs, skip_special_tokens=req.skip_special_tokens,
                                     custom_logit_processor=req.custom_logit_processor,
                                     sampling_mask=req.sampling_logprobs_mode if req.return_sampling_mask else None)
        fe.check_sampling_mask(params)
        gid = fe.new_group_id(prompt.group_id)
        if gid in prompt_index:
            raise APIError(f"group_id {gid!r} appears twice in this rollout", param=f"prompts.{i}.group_id")
        groups.append(fe.make_group(ids, prompt.n or req.n, params, gid, position=i, requested_id=prompt.group_id,
                                    oracle_lengths=prompt.oracle_lengths, custom_params=prompt.custom_params,
                                    lora_path=adapter, routed_experts_start=0 if req.return_routed_experts else None,
                                    media=media))
        prompt_index[gid] = i
    return groups, prompt_index


def _slo_summary(fe: Frontend, samples: list[Sample], at_start: dict[str, int]) -> dict:
    """SLO requests beside this rollout: how its own SLO samples did, and the best-effort decode slots
    the instances deferred for SLO requests while it ran (the rollout's throughput given up)."""
    now = fe.engine.instances.slo_counters()
    decoded, deferred = (now[k] - at_start.get(k, 0) for k in ("best_effort_decoded", "best_effort_deferred"))
    own = [attainment(s.params.slo, s.submitted_at, s.first_token_at, s.finished_at or 0.0, s.generated)
           for s in samples if s.params.slo is not None and s.finish_reason in ("stop", "length")]
    return {"best_effort_decoded": decoded, "best_effort_deferred": deferred,
            "deferred_share": deferred / (decoded + deferred) if decoded + deferred else 0.0,
            "slo_samples": len(own), "slo_met": sum(1 for a in own if a.met),
            "slo_rejected": sum(1 for s in samples if s.params.slo is not None and s.error_status == 429)}


def _summary(fe: Frontend, req: RolloutRequest, groups: list[Group], started: float,
             slo_at_start: dict[str, int]) -> dict:
    samples = [s for g in groups for s in g.samples]
    tokens = sum(s.generated for s in samples)
    elapsed = time.time() - started
    chunks = [c for s in samples for c in s.chunks]
    return {"samples": len(samples), "groups": len(groups), "completion_tokens": tokens,
            "chunks": len(chunks), "retractions": sum(c.retractions for c in chunks),
            "instances_used": sorted({c.instance for c in chunks}),
            "prompt_tokens": sum(len(s.prompt_ids) for s in samples), "elapsed_s": elapsed,
            "throughput_tok_s": tokens / elapsed if elapsed > 0 else 0.0,
            "failed": sum(1 for s in samples if s.error),
            "weight_versions": sorted({v for s in samples for v, _, _ in s.token_versions}),
            "regenerations": sum(s.regenerations for s in samples),
            "kv": rollout_sources(samples, fe.engine.policy.migration),
            "spec": spec_totals(samples),
            "slo": _slo_summary(fe, samples, slo_at_start),
            **({"timeline": [dataclasses.asdict(p) for p in fe.engine.instances.timeline_since(started)]}
               if req.return_timeline else {})}


@router.post("/v1/rollout")
async def rollout(req: RolloutRequest, request: Request):
    fe: Frontend = request.app.state.frontend
    fe.check_available()
    groups, prompt_index = _build_groups(fe, req)
    rollout_id, started = f"rollout-{uuid.uuid4().hex[:12]}", time.time()
    slo_at_start = fe.engine.instances.slo_counters()

    if req.stream:
        queue: asyncio.Queue[Sample] = asyncio.Queue()
        for group in groups:
            for sample in group.samples:
                sample.on_done = queue.put_nowait
        fe.submit(groups)

        async def lines() -> AsyncIterator[bytes]:
            try:
                for _ in range(sum(len(g.samples) for g in groups)):
                    sample = await queue.get()
                    line = {"type": "sample", **fe.sample_json(sample, prompt_index[sample.group_id])}
                    yield json.dumps(line).encode() + b"\n"
                yield json.dumps({"type": "summary", "id": rollout_id, **_summary(fe, req, groups, started, slo_at_start)}).encode() + b"\n"
            finally:
                for group in groups:
                    if not group.done:
                        fe.engine.abort_group(group.group_id)

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    await run_groups(fe, request, groups)
    fe.check_open()  # stopped before the samples finished: a 503, not half a rollout
    failed = [s for g in groups for s in g.samples if s.error]
    if failed and len(failed) == sum(len(g.samples) for g in groups) and all(s.error_status < 500 for s in failed):
        fe.raise_if_failed(s for g in groups for s in g.samples)  # the instances refused the request itself (a 4xx for every sample)
    samples = [fe.sample_json(s, prompt_index[g.group_id]) for g in groups for s in g.samples]
    return json_answer({"id": rollout_id, "model": fe.model.served_name, "samples": samples,
                         "summary": _summary(fe, req, groups, started, slo_at_start)})
