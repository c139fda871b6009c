"""SGLang's native ``/generate`` format, translated to seer's samples and back.

Trainers (slime, AReaL, veRL's HTTP adapter) send SGLang's ``GenerateReqInput`` and read SGLang's
response. The body is parsed with SGLang's own contract check and dataclass, so what SGLang refuses is
refused here with SGLang's message. Every field then either maps onto a seer sample, or has no effect
on what is sampled, or is refused with a 400 that names it: nothing is dropped silently.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import uuid
from array import array
from dataclasses import dataclass
from typing import Any, Callable

from ..core.request import Sample, SamplingParams, derive_seed, group_seed_key
from ..core.slo import SLO
from ..wire import MEDIA, reserved_param
from .errors import APIError

# Top-level fields seer applies (see ``parse_generate``).
_APPLIED = {"text", "input_ids", "sampling_params", "rid", "return_logprob", "logprob_start_len",
            "top_logprobs_num", "return_text_in_logprobs", "stream", "custom_logit_processor",
            "return_prompt_token_ids", "token_ids_logprob", "lora_path", "return_routed_experts",
            "routed_experts_start_len", "return_sampling_mask", "sampling_logprobs_mode", *MEDIA}
# A prompt's media (wire.MEDIA) are sent with every chunk of its samples: a continuation is the
# prompt's tokens (its media placeholders as the caller gave them) plus the output so far, and SGLang
# expands the placeholders from the media again, so every chunk sees what one unchunked request sees.
# Top-level fields sent with every chunk of the sample: cache namespaces, which decide what KV a
# chunk may reuse and never what it samples.
_PASSED = ("extra_key", "cache_salt")
# Top-level fields that change nothing about what is sampled or returned: bookkeeping, tracing and
# routing hints (seer picks the instance). ``priority`` is what SGLang itself does with it when
# priority scheduling is off, its default: nothing. The instances' queue order is seer's.
_NEUTRAL = {"log_metrics", "no_logs", "custom_labels", "conversation_id", "external_trace_header",
            "received_time", "http_worker_ipc", "routing_key", "session_id", "priority", "data_parallel_rank",
            "routed_dp_rank", "disagg_prefill_dp_rank"}
# Sampling params seer applies to every chunk of the sample, or to its text in the frontend.
_SAMPLING_APPLIED = {"max_new_tokens", "stop", "stop_token_ids", "temperature", "top_p", "top_k",
                     "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
                     "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
                     "logit_bias", "sampling_seed", "custom_params", "stream_interval"}
# Refused unless at the value that leaves sampling unchanged, and why.
_SAMPLING_REFUSED = {
    "min_p": ((0, 0.0, None), "SGLang's seeded sampler, which keeps chunked and migrated samples identical "
              "to unchunked ones, does not implement min_p"),
    **{name: ((None, ""), "constrained decoding is not supported") for name in
       ("json_schema", "regex", "ebnf", "structural_tag", "stop_regex", "choice")},
    "beam_width": ((None, 1), "beam search is not supported"),
    "watermark": ((None,), "watermarking is not supported"),
}


# A rid's trailing turn number: an agent loop that names its turns "<trajectory>-<turn>" (or with "_",
# ":", "." or "/") continues one trajectory; one that sends every turn with the same rid does too.
_TURN_SUFFIX = re.compile(r"^(?P<trajectory>.*[^-_:./])[-_:./]\d+$")


def rid_trajectory(rid: str) -> str:
    """The trajectory a caller's rid names: the rid without a trailing turn number, else the rid."""
    match = _TURN_SUFFIX.match(rid)
    return f"rid:{match.group('trajectory') if match else rid}"


@dataclass
class NativeSample:
    """One sample a ``/generate`` call asked for, before it joins a group."""

    position: int  # in SGLang's response order (prompt-major: prompt i, sample j -> i * n + j)
    rid: str  # the caller's rid (``meta_info.id``), or one made up as SGLang does
    prompt_ids: list[int]
    params: SamplingParams
    sampling_seed: int | None
    logprob_start: int  # SGLang's logprob_start_len: -1 = output only, >= 0 = also the prompt from there
    custom_params: dict[str, Any] | None = None
    cache_scope: dict[str, str] | None = None  # the caller's _PASSED fields
    # the agent trajectory it continues (session_id, routing_key, the gateway's routing-key header, else
    # the caller's rid up to a trailing turn number): its turn goes where the trajectory's last turn
    # ran, when that instance has room
    trajectory: str | None = None
    lora_path: str | None = None  # the LoRA adapter (its name) every chunk runs under
    media: dict[str, Any] | None = None  # the prompt's MEDIA fields, as one request would send them
    routed_experts_start: int | None = None  # routing replay: the first position whose routings it wants
    # Set by the route before the sample joins a group (the engine streams chunks when on_tokens is set).
    on_tokens: Callable[[Sample, list[int]], None] | None = None
    on_done: Callable[[Sample], None] | None = None
    abandoned: bool = False  # the caller went away, or aborted it, before its group formed
    sample: Sample | None = None  # set once the sample is in a group
    group: Any = None  # the Group it joined (it may grow while it runs)


@dataclass
class NativeRequest:
    single: bool  # a dict in, a dict out (else a list, as SGLang answers a batch or n > 1)
    stream: bool
    samples: list[NativeSample]
    text_in_logprobs: bool
    return_prompt_ids: bool


def check_custom_params(params: Any, param: str) -> None:
    """A client's custom params: an object (or null) without the keys seer reserves for itself."""
    if params is None:
        return
    if not isinstance(params, dict):
        raise APIError(f"{param} must be an object", param=param)
    key = reserved_param(params)
    if key is not None:
        raise APIError(f"{param}.{key} is reserved for seer_sglang's own use", param=f"{param}.{key}",
                       code="reserved_parameter")


def _empty(value: Any) -> bool:
    """None, or an empty string, list or object (or a list of such, one per prompt): what trainers send
    for a field they do not use (AReaL sends ``image_data: []`` on every request)."""
    if value is None or value == "":
        return True
    if isinstance(value, (list, tuple)):
        return all(_empty(v) for v in value)
    return isinstance(value, dict) and all(_empty(v) for v in value.values())


def _refuse(name: str, why: str) -> APIError:
    return APIError(f"{name} is not supported by seer_sglang ({why}); leave it unset", param=name,
                    code="unsupported_parameter")


@functools.cache
def _generate_input_adapter():
    """Pydantic's validator of SGLang's ``GenerateReqInput``, built once: building it takes ~10 ms,
    which every turn of an agent loop would otherwise wait for."""
    from pydantic import TypeAdapter
    from sglang.srt.managers.io_struct import GenerateReqInput

    return TypeAdapter(GenerateReqInput)


@functools.cache
def _generate_input_fields() -> tuple[frozenset[str], dict[str, Any]]:
    """The fields of SGLang's ``GenerateReqInput``, and the defaults of those seer refuses to change."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    default = GenerateReqInput()
    names = [f.name for f in dataclasses.fields(GenerateReqInput)]
    return frozenset(names), {name: getattr(default, name) for name in names
                              if name not in _APPLIED and name not in _NEUTRAL and name not in _PASSED}


def _sglang_generate_input(body: dict[str, Any]):
    """SGLang's parse of the body: its JSON contract, then its dataclass and batch normalisation."""
    from pydantic import ValidationError
    from sglang.srt.entrypoints.api_contract import generate_contract_error

    known, refused = _generate_input_fields()
    unknown = sorted(set(body) - known)
    if unknown:  # SGLang drops these; a misspelt field here would change the result unnoticed
        raise APIError(f"unknown field {unknown[0]!r}", param=unknown[0])
    error = generate_contract_error(body)
    if error is not None:
        raise APIError(error)
    try:
        obj = _generate_input_adapter().validate_python(body)
    except ValidationError as e:
        first = e.errors()[0]
        raise APIError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}",
                       param=".".join(map(str, first["loc"]))) from e
    for name, default in refused.items():
        value = getattr(obj, name)
        if value != default and not _empty(value):
            raise _refuse(name, "seer_sglang generates text from text or input_ids only")
    try:
        obj.normalize_batch_and_arguments()
    except ValueError as e:
        raise APIError(str(e)) from e
    return obj


def _one_prompt(body: dict[str, Any]) -> bool:
    text, ids = body.get("text"), body.get("input_ids")
    return isinstance(text, str) or (isinstance(ids, list) and bool(ids) and isinstance(ids[0], int))


def _media(body: dict[str, Any], obj: Any, b: int) -> list[dict[str, Any] | None]:
    """Each prompt's media fields. One prompt: as the caller sent them. A batch: each prompt's entry of
    SGLang's own normalisation (prompt i is entry i: SGLang repeats the batch for ``n``)."""
    if _one_prompt(body):
        return [{k: body[k] for k in MEDIA if not _empty(body.get(k))} or None]
    out = []
    for i in range(b):
        given = {}
        for k in MEDIA:
            values = getattr(obj, k, None)
            value = values[i] if isinstance(values, list) and i < len(values) else None
            if not _empty(value):
                given[k] = [value] if k == "modalities" else value
        out.append(given if set(given) - {"modalities"} else None)
    return out


def _per_prompt(value: Any, b: int, name: str) -> list[Any]:
    if isinstance(value, list):
        if len(value) != b:
            raise APIError(f"{name} has {len(value)} entries for {b} prompts", param=name)
        return value
    return [value] * b


def _token_ids_logprob(raw: Any, b: int, vocab_size: int) -> list[list[int] | None]:
    """SGLang's ``token_ids_logprob``: one list of token ids for every prompt, or one list per prompt."""
    if raw is None:
        return [None] * b
    per_prompt = raw if raw and all(isinstance(x, list) for x in raw) else [raw] * b
    if len(per_prompt) != b:
        raise APIError(f"token_ids_logprob has {len(per_prompt)} lists for {b} prompts", param="token_ids_logprob")
    for ids in per_prompt:
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size
                                               for t in ids):
            raise APIError(f"token_ids_logprob must hold token ids in [0, {vocab_size})", param="token_ids_logprob")
    return [list(ids) or None for ids in per_prompt]


def _sampling_masks(body: dict[str, Any], b: int) -> list[str | None]:
    """Each prompt's ``sampling_logprobs_mode`` where it asks for ``return_sampling_mask``, else None
    (SGLang's default mode is "selected"; its parse has refused any other value)."""
    asked = _per_prompt(body.get("return_sampling_mask") or False, b, "return_sampling_mask")
    modes = _per_prompt(body.get("sampling_logprobs_mode"), b, "sampling_logprobs_mode")
    return [(mode or "selected") if ask else None for ask, mode in zip(asked, modes)]


def _sampling(sp: dict[str, Any], vocab_size: int, param: str) -> Any:
    """SGLang's own SamplingParams of one prompt, verified as SGLang verifies it."""
    from sglang.srt.sampling.sampling_params import SamplingParams as SGLangSamplingParams

    for name, (neutral, why) in _SAMPLING_REFUSED.items():
        if sp.get(name) not in neutral:
            raise _refuse(f"{param}.{name}", why)
    unknown = sorted(set(sp) - _SAMPLING_APPLIED - set(_SAMPLING_REFUSED))
    if unknown:
        raise APIError(f"unknown sampling parameter {unknown[0]!r}", param=f"{param}.{unknown[0]}")
    check_custom_params(sp.get("custom_params"), f"{param}.custom_params")
    try:
        parsed = SGLangSamplingParams(**sp)
        parsed.verify(vocab_size)
    except (TypeError, ValueError) as e:
        raise APIError(f"{param}: {e}", param=param) from e
    return parsed


def _check_n(body: dict[str, Any], check_samples) -> None:
    """``sampling_params.n`` (one value, or one per prompt) is a whole number of at least 1, and no
    more than one request may ask for: checked before SGLang's batch normalisation, which builds a
    list entry per sample."""
    raw = body.get("sampling_params")
    for i, sp in enumerate(raw if isinstance(raw, list) else [raw]):
        n = sp.get("n", 1) if isinstance(sp, dict) else 1
        if n is None:
            continue
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            param = "sampling_params.n" if not isinstance(raw, list) else f"sampling_params.{i}.n"
            raise APIError(f"{param} must be an integer of at least 1, not {n!r}", param=param)
        check_samples(n)


def parse_generate(body: Any, *, encode, check_prompt, check_samples, vocab_size: int, context_length: int,
                   slo: SLO | None = None, routing_key: str | None = None) -> NativeRequest:
    """The samples a ``/generate`` body asks for, in SGLang's response order. ``check_prompt(ids,
    max_new, param, budget_param)`` checks a prompt and its budget (``Frontend.check_prompt``);
    ``check_samples(count)`` the number of samples, before any is built (``Frontend.check_samples``)."""
    if not isinstance(body, dict):
        raise APIError("the body must be a JSON object")
    _check_n(body, check_samples)
    obj = _sglang_generate_input(body)
    if obj.text is not None:
        prompts = [obj.text] if isinstance(obj.text, str) else list(obj.text)
    else:
        prompts = [obj.input_ids] if obj.input_ids and isinstance(obj.input_ids[0], int) else list(obj.input_ids)
    b, n, single = obj.batch_size, obj.parallel_sample_num, obj.is_single  # n > 1 makes SGLang answer a list
    check_samples(b * n)
    raw_params = body.get("sampling_params")
    params_list = _per_prompt(raw_params or {}, b, "sampling_params")
    logprob = _per_prompt(body.get("return_logprob") or False, b, "return_logprob")
    start = _per_prompt(-1 if body.get("logprob_start_len") is None else body["logprob_start_len"], b,
                        "logprob_start_len")
    top = _per_prompt(body.get("top_logprobs_num") or 0, b, "top_logprobs_num")
    processors = _per_prompt(body.get("custom_logit_processor"), b, "custom_logit_processor")
    token_ids = _token_ids_logprob(body.get("token_ids_logprob"), b, vocab_size)
    scopes = {name: _per_prompt(body.get(name), b, name) for name in _PASSED}
    trajectory = next((str(v) for v in (body.get("session_id"), body.get("routing_key"), routing_key)
                       if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v)), None)
    masks = _sampling_masks(body, b)
    adapters = _per_prompt(body.get("lora_path"), b, "lora_path")
    if any(a is not None and (not isinstance(a, str) or not a) for a in adapters):
        raise APIError("lora_path names a loaded LoRA adapter (a non-empty string), or is null", param="lora_path")
    routed = body.get("routed_experts_start_len") or 0 if body.get("return_routed_experts") else None
    if routed is not None and (isinstance(routed, bool) or not isinstance(routed, int)):
        raise APIError("routed_experts_start_len must be an integer", param="routed_experts_start_len")
    media = _media(body, obj, b)
    raw_rid = body.get("rid")
    if isinstance(raw_rid, list) and len(raw_rid) != b:
        raise APIError(f"rid has {len(raw_rid)} entries for {b} prompts", param="rid")

    samples: list[NativeSample] = []
    for i, prompt in enumerate(prompts[:b]):
        param = "sampling_params" if isinstance(raw_params, dict) or raw_params is None else f"sampling_params.{i}"
        sp = _sampling(params_list[i], vocab_size, param)
        ids = encode(prompt) if isinstance(prompt, str) else list(prompt)
        max_new = context_length - len(ids) if sp.max_new_tokens is None else sp.max_new_tokens
        check_prompt(ids, max_new, "text" if isinstance(prompt, str) else "input_ids", f"{param}.max_new_tokens")
        # with media the instance counts the prompt with each placeholder expanded, and checks the start there
        if routed is not None and (routed < 0 or (not media[i] and routed > len(ids))):
            raise APIError(f"routed_experts_start_len {routed} is outside [0, {len(ids)}] (the prompt's tokens)",
                           param="routed_experts_start_len")
        if not -1 <= start[i] <= len(ids):
            raise APIError(f"logprob_start_len {start[i]} is outside [-1, {len(ids)}]", param="logprob_start_len")
        if sp.min_new_tokens > max_new:
            raise APIError(f"min_new_tokens ({sp.min_new_tokens}) exceeds max_new_tokens ({max_new})",
                           param=f"{param}.min_new_tokens")
        if top[i] and not logprob[i]:
            top[i] = 0  # SGLang returns no logprobs at all without return_logprob
        params = SamplingParams(
            max_new_tokens=max_new, temperature=sp.temperature, top_p=sp.top_p, top_k=sp.top_k,
            stop=[sp.stop_strs] if isinstance(sp.stop_strs, str) else list(sp.stop_strs or []),
            stop_token_ids=sorted(sp.stop_token_ids or ()), seed=None, logprobs=bool(logprob[i]),
            top_logprobs=int(top[i]), ignore_eos=sp.ignore_eos, skip_special_tokens=sp.skip_special_tokens,
            custom_logit_processor=processors[i], frequency_penalty=sp.frequency_penalty,
            presence_penalty=sp.presence_penalty, repetition_penalty=sp.repetition_penalty,
            min_tokens=sp.min_new_tokens, token_ids_logprob=token_ids[i] if logprob[i] else None,
            logit_bias={str(int(k)): float(v) for k, v in sp.logit_bias.items()} if sp.logit_bias else None,
            no_stop_trim=sp.no_stop_trim, sampling_mask=masks[i],
            spaces_between_special_tokens=sp.spaces_between_special_tokens, slo=slo)
        for j in range(n):
            k = i * n + j
            if raw_rid is None:
                rid = uuid.uuid4().hex
            elif isinstance(raw_rid, list):
                rid = str(raw_rid[i]) if n == 1 else f"{raw_rid[i]}_{j}"
            else:
                rid = str(raw_rid) if single else f"{raw_rid}_{k}"
            # A caller's seed is hashed with the sample's identity: its rid when the caller named it,
            # else the prompt and the sample's place in the request. Siblings never share noise, and
            # the same request with the same seed draws the same samples again.
            seed = None
            if sp.sampling_seed is not None:
                seed_key = f"rid:{rid}" if raw_rid is not None else group_seed_key(ids, i)
                seed = derive_seed(sp.sampling_seed, seed_key, j)
            scope = {name: str(values[i]) for name, values in scopes.items() if values[i] is not None}
            named = raw_rid[i] if isinstance(raw_rid, list) else raw_rid
            path = trajectory if trajectory is not None or named is None else rid_trajectory(str(named))
            samples.append(NativeSample(position=k, rid=rid, prompt_ids=ids, params=params, sampling_seed=seed,
                                        logprob_start=int(start[i]) if logprob[i] else -1,
                                        custom_params=sp.custom_params, cache_scope=scope or None,
                                        trajectory=path, lora_path=adapters[i], routed_experts_start=routed,
                                        media=media[i]))
    return NativeRequest(single=single, stream=bool(obj.stream), samples=samples,
                         text_in_logprobs=bool(body.get("return_text_in_logprobs")),
                         return_prompt_ids=bool(body.get("return_prompt_token_ids")))


def group_key(native: NativeSample, explicit: str | None) -> str:
    """Which requests may share a group: the same prompt and the same settings (a seed aside: siblings
    draw with their own), and the same group key when the caller gives one."""
    settings = dataclasses.asdict(native.params)
    settings.pop("seed", None)
    text = json.dumps([explicit, settings, native.logprob_start, native.custom_params, native.cache_scope,
                       native.lora_path, native.routed_experts_start, native.media], sort_keys=True, default=str)
    digest = hashlib.blake2b(text.encode(), digest_size=16)
    # The prompt as 8 bytes a token (``Frontend.check_prompt`` has held each id to the vocabulary): a
    # long prompt is hashed, not printed.
    digest.update(array("q", native.prompt_ids).tobytes())
    return digest.hexdigest()  # kept while the group runs: small


# ---- the response ------------------------------------------------------------------------------
def finish_reason(sample: Sample) -> dict[str, Any] | None:
    """SGLang's ``meta_info.finish_reason``."""
    if sample.finish_reason == "length":
        return {"type": "length", "length": sample.params.max_new_tokens}
    if sample.finish_reason == "stop":
        return {"type": "stop", "matched": sample.matched_stop}
    if sample.finish_reason in ("abort", "error"):
        return {"type": "abort", "message": sample.error or "aborted"}
    return None


def _logprob_entries(pairs: list[tuple[float | None, int]], token_str, with_text: bool) -> list[list[Any]]:
    return [[lp, tid, token_str(tid) if with_text else None] for lp, tid in pairs]


def response(native: NativeSample, req: NativeRequest, tokenizer, text: str) -> dict[str, Any]:
    """One sample in SGLang's response shape; ``meta_info`` sums what the sample's chunks reported."""
    s = native.sample
    assert s is not None
    chunks = s.chunks
    meta: dict[str, Any] = {
        **s.meta(),  # the instances' own keys seer does not build, joined over the chunks
        "id": native.rid,
        "finish_reason": finish_reason(s),
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.generated,
        # SGLang's: prompt tokens found cached (a trainer's prefix-hit rate divides it by prompt_tokens);
        # the chunk that prefilled the prompt says it. Every chunk's cached context is seer's own key.
        "cached_tokens": min(chunks[0].cached_tokens, s.prompt_tokens) if chunks else 0,
        "seer_cached_context_tokens": sum(c.cached_tokens for c in chunks),
        "weight_version": s.weight_version,
        "weight_versions": [{"version": v, "start": a, "end": e} for v, a, e in s.token_versions],
        "num_retractions": sum(c.retractions for c in chunks),
        "e2e_latency": (s.finished_at or s.submitted_at) - s.submitted_at,
        # seer's: the prompt group the sample ran in (per-sample requests of one prompt are grouped)
        "group_id": s.group_id,
        "group_size": len(native.group.samples) if native.group is not None else 1,
    }
    steps = sum(c.draft_steps for c in chunks)
    if steps:
        accepted = sum(c.accepted_tokens for c in chunks)
        proposed = sum(c.proposed_drafts for c in chunks)
        # SGLang's keys, and the ones slime's accept rate sums (spec_accept_token_num / spec_draft_token_num)
        meta.update(spec_verify_ct=steps, spec_num_correct_drafts=accepted, spec_accept_token_num=accepted,
                    spec_num_proposed_drafts=proposed, spec_draft_token_num=proposed,
                    spec_accept_length=(accepted + steps) / steps)
        if proposed:
            meta["spec_accept_rate"] = accepted / proposed
    if s.params.logprobs:
        def entries(pairs):
            return _logprob_entries(pairs, tokenizer.token_str, req.text_in_logprobs)

        def output_steps(steps):  # (token id, logprob) per position
            return [entries([(lp, t) for t, lp in step]) for step in steps]

        def input_steps(steps):  # (logprob, token id) per prompt position; None where SGLang has none
            return [None if step is None else entries(step) for step in steps]

        meta["output_token_logprobs"] = entries(list(zip(s.logprobs, s.output_ids)))
        meta["output_token_logprobs_length"] = len(s.logprobs)
        meta["input_token_logprobs"] = entries(s.input_logprobs)
        if s.params.top_logprobs:
            meta["output_top_logprobs"] = output_steps(s.top_logprobs)
            meta["input_top_logprobs"] = input_steps(s.input_top_logprobs)
        if s.params.token_ids_logprob:
            meta["output_token_ids_logprobs"] = output_steps(s.token_ids_logprobs)
            meta["input_token_ids_logprobs"] = input_steps(s.input_token_ids_logprobs)
    if s.params.sampling_mask is not None:
        meta["output_token_sampling_mask"] = s.sampling_masks
        meta["output_token_sampling_logprobs"] = s.sampling_logprobs
        meta["output_token_sampling_mask_length"] = len(s.sampling_masks)
    if s.routed_experts_start is not None:
        meta["routed_experts"] = s.routed_experts_base64()
    out = {"text": text, "output_ids": list(s.output_ids), "meta_info": meta}
    if req.return_prompt_ids:  # beside meta_info, where SGLang puts it
        out["prompt_token_ids"] = list(s.prompt_ids)
    return out
