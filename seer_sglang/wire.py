"""Contracts between the processes: written here once, read by every side.

- **rids.** A sample is ``<group>-<index>``; each chunk of it goes to SGLang as
  ``<group>-<index>-c<chunk>``. The frontend writes them; the plugin's queue order and the SEER worker
  read the group and the sample back out of SGLang's rid.
- **SGLang names** the plugin registers and the launcher passes on the instances' command line.
- **Custom params** the SEER verify step adds for custom logit processors.
- **Cache namespaces**: the plugin keys KV pages by weight version; the frontend probes the pool so.
- **The sample schema** of ``/v1/rollout``: built by the frontend, parsed by ``seer_sglang.client``.

Imports nothing from the package.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson


def json_bytes(body: Any) -> bytes:
    """JSON as SGLang writes it (orjson: a non-finite float, such as a -inf logprob, is null), for the
    chunks sent to instances and the answers sent to callers; what orjson cannot write (an integer past
    64 bits in a caller's custom params) is written by the standard library."""
    try:
        return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(body).encode()

# ---- rids -----------------------------------------------------------------------------------------
CHUNK_RID = re.compile(r"^(?P<group>.+)-(?P<index>\d+)-c(?P<chunk>\d+)$")


class ChunkRid(NamedTuple):
    group: str
    sample: str  # <group>-<index>: shared by all chunks of the sample
    chunk: int


def sample_rid(group_id: str, index: int) -> str:
    return f"{group_id}-{index}"


def chunk_rid(sample: str, chunk: int) -> str:
    return f"{sample}-c{chunk}"


def parse_chunk_rid(rid: str | None) -> ChunkRid | None:
    """The group, sample and chunk of an SGLang rid; None for a rid the frontend did not write."""
    match = CHUNK_RID.match(rid or "")
    if match is None:
        return None
    group = match.group("group")
    return ChunkRid(group, sample_rid(group, int(match.group("index"))), int(match.group("chunk")))


def group_of_sample(rid: str) -> str:
    """The group id of a sample rid ``<group>-<index>``."""
    return rid.rsplit("-", 1)[0]


# ---- POST /generate: a trainer that knows its groups names them -----------------------------------
# in the body (dropped before SGLang's parse) or as headers
GROUP_FIELD, GROUP_SIZE_FIELD = "seer_group", "seer_group_size"
GROUP_HEADER, GROUP_SIZE_HEADER = "x-seer-group", "x-seer-group-size"
# sgl-model-gateway's header naming a trajectory: its turns go to the instance that ran the last one
ROUTING_KEY_HEADER = "x-smg-routing-key"


# ---- SGLang names registered by the plugin ---------------------------------------------------------
SPEC_ALGORITHM = "SEER"  # --speculative-algorithm
VERIFY_BACKEND = "seer_verify"  # --attention-backend: torch-native + tree verify (CPU)
CASCADE_BACKEND = "seer_cascade"  # --attention-backend: FlashInfer + cascade tree verify (GPU)
SEEDED_SAMPLER = "pytorch"  # --sampling-backend: the only one that draws with per-request seeds

# ---- KV cache namespaces -----------------------------------------------------------------------
def weight_namespace(weight_version: str) -> str:
    """The part of a request's cache key (SGLang's ``extra_key``) that the plugin adds: pages are
    keyed by the weights that computed them."""
    return f"weight_version={weight_version}"


def adapter_namespace(digest: str) -> str:
    """The cache key part (``extra_key``) of a request under a LoRA adapter: a digest of the adapter's
    weights and config, where SGLang keys it by an id each instance draws when it loads the adapter.
    The same adapter on every instance has the same key, so a moved sample finds its pages in the pool;
    other weights under the same name never match them."""
    return f"lora={digest}"


def routing_namespace(rid: str, regenerations: int) -> str:
    """The cache key part (``extra_key``) of a sample that wants its prompt's expert routings. SGLang
    keeps a token's routings beside its KV slot on the device only: a prompt whose KV came from the
    host tier or the pool would answer stale rows. In its own namespace the sample's first chunk
    computes its whole prompt; its continuations still find their own earlier pages (the rows they
    ask for are never cached: a chunk's context ends with the token the last chunk sampled)."""
    return f"routed_experts={rid}.{regenerations}"


# ---- custom params --------------------------------------------------------------------------------
# Added to a custom logit processor's params on each verify-tree row: the row's distance from the
# request's last committed token (0 on the SEER worker's plain decode rows).
DEPTH_PARAM = "__draft_depth__"
REQ_PARAM = "__req__"  # SGLang's own: the Req object of the row
# On a continuation chunk of a penalized sample: how many of the input's last tokens are the sample's
# earlier output. The plugin counts them into SGLang's penalizers, which see only the chunk's output.
PRIOR_OUTPUT_PARAM = "__seer_prior_output__"


def prior_output(params: Any) -> int:
    """``PRIOR_OUTPUT_PARAM`` of a chunk's custom params, checked: a non-negative int, else 0."""
    value = params.get(PRIOR_OUTPUT_PARAM, 0) if isinstance(params, dict) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


# The file pool's directory holds this file: the launcher writes it into a directory it takes for the
# pool (empty, or already marked), and refuses one that holds anything else; the frontend's janitor
# touches only the model's page files there.
POOL_MARKER = ".seer-kv-pool"


# ---- chunk messages: the frontend's /generate call for one chunk, and what it reads back -------------
MEDIA = ("image_data", "video_data", "audio_data", "modalities")  # SGLang's media fields of a request


@dataclass
class ChunkRequest:
    """The body of one chunk's ``/generate`` call (SGLang's ``GenerateReqInput`` fields it sets): the
    sample's context as ``input_ids`` and its sampling params for this chunk."""

    rid: str  # chunk_rid(...): the plugin reads the group and sample back out of it
    input_ids: list[int]
    sampling_params: dict[str, Any]
    return_logprob: bool = False
    logprob_start_len: int | None = None
    top_logprobs_num: int = 0
    priority: int = 0
    custom_logit_processor: str | None = None
    extra_key: str | None = None
    cache_salt: str | None = None
    token_ids_logprob: list[int] | None = None
    lora_path: str | None = None
    routed_experts_start_len: int | None = None  # None: no routings asked
    # SGLang's sampling_logprobs_mode when the token supports are asked (return_sampling_mask), else None
    sampling_logprobs_mode: str | None = None
    # the prompt's media, sent with every chunk (SGLang expands the prompt's placeholders from them)
    image_data: Any = None
    video_data: Any = None
    audio_data: Any = None
    modalities: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"rid": self.rid, "input_ids": self.input_ids,
                                "sampling_params": self.sampling_params, "return_logprob": self.return_logprob}
        if self.return_logprob:
            body["logprob_start_len"] = self.logprob_start_len
            if self.top_logprobs_num:
                body["top_logprobs_num"] = self.top_logprobs_num
            if self.token_ids_logprob:
                body["token_ids_logprob"] = self.token_ids_logprob
        if self.priority:
            body["priority"] = self.priority
        if self.custom_logit_processor:
            body["custom_logit_processor"] = self.custom_logit_processor
        for name in ("extra_key", "cache_salt", "lora_path"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        body.update({name: getattr(self, name) for name in MEDIA if getattr(self, name) is not None})
        if self.sampling_logprobs_mode is not None:
            body["return_sampling_mask"] = True
            body["sampling_logprobs_mode"] = self.sampling_logprobs_mode
        if self.routed_experts_start_len is not None:
            body["return_routed_experts"] = True
            body["routed_experts_start_len"] = self.routed_experts_start_len
        return body


# ---- meta_info: what seer builds itself, and how the rest of an instance's keys join over chunks ----
# The keys the frontend computes for a sample from all its chunks (``frontend/native.py: response``);
# an instance's value of one of these describes its chunk only. SGLang's ``spec_*`` keys are seer's too.
OWN_META = frozenset({
    "id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "weight_version",
    "weight_versions", "num_retractions", "e2e_latency", "output_token_logprobs", "output_token_logprobs_length",
    "input_token_logprobs", "output_top_logprobs", "input_top_logprobs", "output_token_ids_logprobs",
    "input_token_ids_logprobs", "output_token_sampling_mask", "output_token_sampling_logprobs",
    "output_token_sampling_mask_length", "routed_experts"})
# Counts and times over a chunk's work, which add up over the sample's chunks.
SUMMED_META = frozenset({"reasoning_tokens", "queue_time"})
# The prompt's, from the chunk that prefilled it (as ``cached_tokens``).
FIRST_META = frozenset({"cached_tokens_details"})


def passed_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The keys of a chunk's ``meta_info`` that seer passes on to the caller: every key it does not
    build itself, such as what a plugin or a patched SGLang adds (SGLang's ``customized_info``)."""
    return {k: v for k, v in meta.items() if k not in OWN_META and not k.startswith("spec_")}


def join_meta(scalars: dict[str, Any], per_token: dict[str, list[Any]], chunk: dict[str, Any], base: int,
              new_tokens: int) -> None:
    """Join one chunk's passed keys into a sample's (``base``: the sample's tokens before the chunk,
    ``new_tokens``: the chunk's). A list with one entry per new token is per-token, as SGLang's
    ``customized_info`` is: the chunks' lists join end to end (positions before a key's first chunk are
    None, as SGLang pads them). Counts in ``SUMMED_META`` add up, ``FIRST_META`` is the first chunk's,
    and any other value is the latest chunk's."""
    for key, value in chunk.items():
        if key in SUMMED_META and isinstance(value, (int, float)) and not isinstance(value, bool):
            scalars[key] = scalars.get(key, 0) + value
        elif key in FIRST_META:
            scalars.setdefault(key, value)
        elif key in per_token or (isinstance(value, list) and new_tokens and len(value) == new_tokens):
            joined = per_token.setdefault(key, [])
            joined.extend([None] * (base - len(joined)))
            joined.extend(value if isinstance(value, list) else [value] * new_tokens)
        else:
            scalars[key] = value


@dataclass
class ChunkAnswer:
    """What the frontend reads of SGLang's answer to a chunk (the whole answer, or one stream event;
    SGLang's fields are cumulative over the chunk in both). Missing fields read as SGLang leaves them
    out: nothing cached, no speculation, no version reported."""

    output_ids: list[int]
    finish: dict[str, Any] | None  # SGLang's finish_reason: {"type": "stop" | "length" | "abort", ...}
    weight_version: str | None = None
    # (version, start, end) in the chunk's output positions, for a request that ran across an update
    weight_spans: list[tuple[str, int, int]] = field(default_factory=list)
    cached_tokens: int = 0
    cached_details: dict[str, int] | None = None  # device / host / storage, when SGLang reports them
    verify_steps: int = 0  # spec_verify_ct
    accepted_drafts: int = 0  # spec_num_correct_drafts
    proposed_drafts: int = 0  # spec_num_proposed_drafts
    retractions: int = 0  # num_retractions
    routed_experts: str | None = None  # base64 of int32 [positions, layers, top-k], when asked
    prompt_tokens: int | None = None  # the chunk's input as the instance counts it (media expanded)
    # SGLang's logprob lists as they came ([logprob, token id, text] entries), read by position below:
    # a stream repeats them whole in every event, so only the new positions are converted.
    raw_output_logprobs: list[Any] = field(default_factory=list)
    raw_output_top_logprobs: list[Any] = field(default_factory=list)
    raw_input_logprobs: list[Any] = field(default_factory=list)
    raw_input_top_logprobs: list[Any] = field(default_factory=list)
    raw_output_token_ids_logprobs: list[Any] = field(default_factory=list)
    raw_input_token_ids_logprobs: list[Any] = field(default_factory=list)
    raw_sampling_masks: list[Any] = field(default_factory=list)  # output_token_sampling_mask
    raw_sampling_logprobs: list[Any] = field(default_factory=list)  # output_token_sampling_logprobs
    passed: dict[str, Any] = field(default_factory=dict)  # passed_meta(meta_info)

    @classmethod
    def parse(cls, event: dict[str, Any]) -> "ChunkAnswer":
        meta = event.get("meta_info") or {}
        version = meta.get("weight_version")
        details = meta.get("cached_tokens_details")
        return cls(
            output_ids=list(event.get("output_ids") or []), finish=meta.get("finish_reason"),
            weight_version=None if version is None else str(version),
            weight_spans=[(str(s["version"]), int(s["start"]), int(s["end"]))
                          for s in meta.get("weight_versions") or []],
            cached_tokens=int(meta.get("cached_tokens") or 0),
            cached_details=None if not details else {k: int(details.get(k) or 0) for k in ("device", "host", "storage")},
            verify_steps=int(meta.get("spec_verify_ct") or 0),
            accepted_drafts=int(meta.get("spec_num_correct_drafts") or 0),
            proposed_drafts=int(meta.get("spec_num_proposed_drafts") or 0),
            retractions=int(meta.get("num_retractions") or 0),
            routed_experts=meta.get("routed_experts"),
            prompt_tokens=None if meta.get("prompt_tokens") is None else int(meta["prompt_tokens"]),
            raw_output_logprobs=meta.get("output_token_logprobs") or [],
            raw_output_top_logprobs=meta.get("output_top_logprobs") or [],
            raw_input_logprobs=meta.get("input_token_logprobs") or [],
            raw_input_top_logprobs=meta.get("input_top_logprobs") or [],
            raw_output_token_ids_logprobs=meta.get("output_token_ids_logprobs") or [],
            raw_input_token_ids_logprobs=meta.get("input_token_ids_logprobs") or [],
            raw_sampling_masks=meta.get("output_token_sampling_mask") or [],
            raw_sampling_logprobs=meta.get("output_token_sampling_logprobs") or [], passed=passed_meta(meta))

    @property
    def finish_type(self) -> str | None:
        return (self.finish or {}).get("type")

    def output_logprobs(self, start: int, end: int) -> list[float]:
        return [float(e[0]) for e in self.raw_output_logprobs[start:end]]

    def output_top_logprobs(self, start: int, end: int) -> list[list[tuple[int, float]]]:
        """Each position's top tokens as (token id, logprob)."""
        return self._per_position(self.raw_output_top_logprobs, start, end)

    def output_token_ids_logprobs(self, start: int, end: int) -> list[list[tuple[int, float]]]:
        """Each position's (token id, logprob) of the tokens ``token_ids_logprob`` named."""
        return self._per_position(self.raw_output_token_ids_logprobs, start, end)

    def sampling_masks(self, start: int, end: int) -> list[list[int]]:
        """Each position's sampling support: the token ids its top-k / top-p cut kept."""
        return [[int(t) for t in mask] for mask in self.raw_sampling_masks[start:end]]

    def sampling_logprobs(self, start: int, end: int) -> list[Any]:
        """Each position's behaviour logprob: the drawn token's within its support, or (mode
        "support") one per support token."""
        return [[float(v) for v in e] if isinstance(e, list) else float(e)
                for e in self.raw_sampling_logprobs[start:end]]

    @staticmethod
    def _per_position(raw: list[Any], start: int, end: int) -> list[list[tuple[int, float]]]:
        return [[(int(t[1]), float(t[0])) for t in (entry or [])] for entry in raw[start:end]]

    def input_logprobs(self) -> list[tuple[float | None, int]]:
        """The prompt's (logprob, token id); the first token has no logprob."""
        return [(None if e[0] is None else float(e[0]), int(e[1])) for e in self.raw_input_logprobs]

    def input_top_logprobs(self) -> list[list[tuple[float, int]] | None]:
        return self._input_steps(self.raw_input_top_logprobs)

    def input_token_ids_logprobs(self) -> list[list[tuple[float, int]] | None]:
        return self._input_steps(self.raw_input_token_ids_logprobs)

    @staticmethod
    def _input_steps(raw: list[Any]) -> list[list[tuple[float, int]] | None]:
        return [None if step is None else [(float(e[0]), int(e[1])) for e in step] for step in raw]


# ---- the sample schema ----------------------------------------------------------------------------
@dataclass
class ChunkJSON:
    """One dispatch of a sample, as ``/v1/rollout`` reports it."""

    instance: int
    start: float
    end: float | None
    tokens: int
    cached_tokens: int = 0
    kv: dict[str, int] | None = None  # context tokens by source: device, host, pool, recomputed
    spec: dict[str, int] | None = None  # speculative decoding: draft_steps, accepted_tokens
    weight_version: str | None = None  # the instance's weights when the chunk ended


@dataclass
class SampleJSON:
    """One sample of ``/v1/rollout`` (a line of its stream, or an entry of ``samples``)."""

    prompt_index: int
    group_id: str
    index: int
    output_ids: list[int]
    text: str
    logprobs: list[float] | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    first_token_s: float | None
    chunks: list[ChunkJSON] = field(default_factory=list)
    error: str | None = None
    rid: str = ""
    spec: dict[str, Any] | None = None  # draft_steps, accepted_tokens, mean_acceptance_length
    top_logprobs: list[list[list[float]]] | None = None  # per token: [token_id, logprob] pairs
    submitted_at: float = 0.0
    weight_version: str | None = None  # the weights that generated the sample (the last, if several)
    # [version, start, end) runs of output tokens; more than one only with --mixed-weight-versions
    weight_versions: list[list[Any]] | None = None
    regenerations: int = 0  # restarts from the prompt because the weights changed under the sample
    # with return_routed_experts: base64 of int32 [prompt + output - 1, layers, top-k], as SGLang's
    routed_experts: str | None = None
    # with return_sampling_mask: SGLang's output_token_sampling_mask / output_token_sampling_logprobs
    sampling_mask: list[list[int]] | None = None
    sampling_logprobs: list[Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_index": self.prompt_index, "group_id": self.group_id, "index": self.index, "rid": self.rid,
            "output_ids": self.output_ids, "text": self.text, "logprobs": self.logprobs,
            "top_logprobs": self.top_logprobs, "finish_reason": self.finish_reason, "error": self.error,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "timing": {"submitted_at": self.submitted_at, "first_token_s": self.first_token_s,
                       "latency_s": self.latency_s},
            "spec": self.spec, "weight_version": self.weight_version, "weight_versions": self.weight_versions,
            "regenerations": self.regenerations,
            **({"routed_experts": self.routed_experts} if self.routed_experts is not None else {}),
            **({"sampling_mask": self.sampling_mask, "sampling_logprobs": self.sampling_logprobs}
               if self.sampling_mask is not None else {}),
            "chunks": [c.__dict__.copy() for c in self.chunks],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SampleJSON":
        timing = d.get("timing") or {}
        return cls(prompt_index=d["prompt_index"], group_id=d["group_id"], index=d["index"],
                   output_ids=d["output_ids"], text=d["text"], logprobs=d.get("logprobs"),
                   finish_reason=d.get("finish_reason"), prompt_tokens=d["prompt_tokens"],
                   completion_tokens=d["completion_tokens"], latency_s=timing.get("latency_s", 0.0),
                   first_token_s=timing.get("first_token_s"),
                   chunks=[ChunkJSON(**c) for c in d.get("chunks") or []], error=d.get("error"),
                   rid=d.get("rid", ""), spec=d.get("spec"), top_logprobs=d.get("top_logprobs"),
                   submitted_at=timing.get("submitted_at", 0.0), weight_version=d.get("weight_version"),
                   weight_versions=d.get("weight_versions"), regenerations=d.get("regenerations", 0),
                   routed_experts=d.get("routed_experts"), sampling_mask=d.get("sampling_mask"),
                   sampling_logprobs=d.get("sampling_logprobs"))

# ---- SLO requests ------------------------------------------------------------------------------------
# Sent in a chunk's custom params when its request carries an ``slo``: the TPOT and TTFT objectives in
# seconds (either may be null) and the unix time by which its first token is due (null without a TTFT
# SLO). The plugin's credit batching, VBS admission and deadline order read it.
SLO_PARAM = "__seer_slo__"
# The message of an abort by which an instance refuses an SLO request; the frontend answers it with 429.
SLO_REJECTED = "seer_slo_rejected"


def slo_param(tpot_s: float | None, ttft_s: float | None, deadline: float | None) -> dict[str, float | None]:
    return {"tpot_s": tpot_s, "ttft_s": ttft_s, "deadline": deadline}


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def slo_param_error(value: Any) -> str | None:
    """Why ``value`` is not an ``SLO_PARAM`` the frontend writes, or None when it is one."""
    if not isinstance(value, dict) or set(value) != {"tpot_s", "ttft_s", "deadline"}:
        return f"{SLO_PARAM} must be an object with exactly tpot_s, ttft_s and deadline"
    bad = [k for k, v in value.items() if v is not None and not _positive(v)]
    return f"{SLO_PARAM}.{bad[0]} must be null or a positive finite number" if bad else None


# ---- reserved custom params ---------------------------------------------------------------------------
# Keys of a chunk's custom params that the frontend and the verify step write and the plugin reads. A
# client's custom params may not carry them: the frontend refuses such a request (400), and the plugin
# checks every value it reads (``prior_output``, ``slo_param_error``), failing only the request.
RESERVED_PARAMS = (SLO_PARAM, PRIOR_OUTPUT_PARAM, DEPTH_PARAM, REQ_PARAM)


def reserved_param(params: Any) -> str | None:
    """The first reserved key of a client's custom params, or None."""
    if not isinstance(params, dict):
        return None
    return next((k for k in params if k in RESERVED_PARAMS or (isinstance(k, str) and k.startswith("__seer"))), None)
