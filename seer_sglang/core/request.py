"""The rollout's units of work: a prompt group of G samples, each generated in one or more chunks."""

from __future__ import annotations

import base64
import enum
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..wire import PRIOR_OUTPUT_PARAM, join_meta, sample_rid
from .slo import SLO


@dataclass
class SamplingParams:
    """Per-sample sampling settings; ``max_new_tokens`` is the sample's total budget, not a chunk's."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    token_ids_logprob: list[int] | None = None  # SGLang's: these tokens' logprobs at every position
    # SGLang's return_sampling_mask: each output token's sampling support (the token ids top-k / top-p
    # left) and its behaviour logprob within it, for a trainer that replays the cut; the value is
    # SGLang's sampling_logprobs_mode ("selected": the drawn token's; "support": every kept token's).
    sampling_mask: str | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    custom_logit_processor: str | None = None  # SGLang's serialized processor (instances need the flag)
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0  # counted from the sample's start, not the chunk's
    logit_bias: dict[str, float] | None = None  # token id (a string, as SGLang takes it) -> logit bias
    # How the frontend turns the sample's ids into text (SGLang's detokenizer options).
    no_stop_trim: bool = False  # keep a matched stop string / stop token in the text
    spaces_between_special_tokens: bool = True
    # Service objectives of an interactive request beside a rollout; None: best-effort (rollout samples).
    slo: SLO | None = None

    @property
    def penalized(self) -> bool:
        """Whether earlier output changes the next token's distribution (SGLang's penalizers)."""
        return bool(self.frequency_penalty or self.presence_penalty or self.repetition_penalty != 1.0)

    def to_sglang(self, max_new_tokens: int, seed: int | None, generated: int = 0) -> dict[str, Any]:
        """SGLang's sampling params for a chunk of ``max_new_tokens`` after ``generated`` tokens.

        A continuation chunk's input ends with the sample's earlier output. Penalties must count it as
        output, not prompt: ``PRIOR_OUTPUT_PARAM`` tells the plugin how many input tokens those are.
        ``min_tokens`` becomes what is left of it, capped at the chunk (SGLang checks both bounds).
        """
        params: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "ignore_eos": self.ignore_eos,
            "skip_special_tokens": self.skip_special_tokens,
        }
        if self.stop:
            params["stop"] = list(self.stop)
        if self.stop_token_ids:
            params["stop_token_ids"] = list(self.stop_token_ids)
        if seed is not None:
            params["sampling_seed"] = seed
        if self.penalized:
            params.update(frequency_penalty=self.frequency_penalty, presence_penalty=self.presence_penalty,
                          repetition_penalty=self.repetition_penalty)
            if generated:
                params["custom_params"] = {PRIOR_OUTPUT_PARAM: generated}
        if self.logit_bias:
            params["logit_bias"] = dict(self.logit_bias)
        if self.min_tokens > generated:
            params["min_new_tokens"] = min(max_new_tokens, self.min_tokens - generated)
        return params


def derive_seed(user_seed: int | None, group_key: str, index: int) -> int:
    """The seed of sibling ``index`` of the group ``group_key``.

    With a request seed: a hash of (seed, group, sibling), so every sample of a rollout draws its own
    noise (two groups never share it, even with the same prompt) and the same request with the same
    seed draws the same samples again. Without one: fresh randomness for every sample of every rollout.
    """
    if user_seed is None:
        return secrets.randbits(62)
    digest = hashlib.blake2b(f"{user_seed}\x1f{group_key}\x1f{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2  # 62 bits, as SGLang's sampling_seed takes


def group_seed_key(prompt_ids: Sequence[int], position: int, group_id: str | None = None) -> str:
    """A prompt group's identity for its seeds, stable across repeats of the same request: the group id
    the caller chose, else the prompt's position in the request and its tokens."""
    if group_id:
        return f"id:{group_id}"
    tokens = hashlib.blake2b(",".join(map(str, prompt_ids)).encode(), digest_size=8).hexdigest()
    return f"at:{position}:{tokens}"


class SampleState(str, enum.Enum):
    PENDING = "pending"  # in the buffer, waiting for a dispatch
    RUNNING = "running"  # a chunk is on an instance
    FINISHED = "finished"
    FAILED = "failed"
    ABORTED = "aborted"


@dataclass
class ChunkRecord:
    """One dispatch of a sample to an instance."""

    instance: int
    start: float
    max_new_tokens: int
    end: float | None = None
    new_tokens: int = 0
    cached_tokens: int = 0
    retractions: int = 0
    # Where the chunk's context (prompt + generated so far) came from; the rest was recomputed.
    device_tokens: int = 0
    host_tokens: int = 0
    pool_tokens: int = 0
    context_tokens: int = 0
    # Speculative decoding: verify steps, and draft tokens they accepted (each step also emits one token).
    draft_steps: int = 0
    accepted_tokens: int = 0
    proposed_drafts: int = 0  # draft tokens SGLang counts as proposed (spec_num_proposed_drafts)
    weight_version: str | None = None  # the instance's weights when the chunk ended (SGLang's meta_info)
    # The instance answered (or streamed) for this chunk. A chunk lost with its instance reported
    # nothing: where its context came from is unknown, and it is neither a hit nor a recompute.
    reported: bool = False

    @property
    def recomputed_tokens(self) -> int:
        return max(0, self.context_tokens - self.cached_tokens) if self.reported else 0


# Called with (sample, new_token_ids) as tokens arrive, when the caller asked to stream.
TokenCallback = Callable[["Sample", list[int]], None]


@dataclass
class Sample:
    """One of the G requests of a group. Its output grows chunk by chunk until it finishes."""

    rid: str
    group_id: str
    index: int
    prompt_ids: list[int]
    params: SamplingParams
    state: SampleState = SampleState.PENDING
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    # per output position, (token id, logprob) of each of ``params.token_ids_logprob``
    token_ids_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    # per output position, when ``params.sampling_mask``: SGLang's support token ids, and the behaviour
    # logprob (a float, or one per support token in "support" mode)
    sampling_masks: list[list[int]] = field(default_factory=list)
    sampling_logprobs: list[Any] = field(default_factory=list)
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    matched_stop: int | str | None = None
    error: str | None = None
    error_status: int = 500
    chunks: list[ChunkRecord] = field(default_factory=list)
    instance: int | None = None  # where the running chunk is
    failures: int = 0  # chunks lost to an instance that stopped answering
    # Instances that dropped the sample's chunks in a row, each by closing the connection mid-request
    # (as a dying process does); emptied when a chunk comes back. Two is the most one sample may cost.
    crashed_on: list[int] = field(default_factory=list)
    pool_tokens: int = 0  # context tokens known to be in the global KV pool (whole pages)
    is_probe: bool = False
    priority: int = 0
    oracle_length: int | None = None  # benchmarks only; ignored by every non-oracle policy
    custom_params: dict[str, Any] | None = None  # for the custom logit processor; opaque to policies
    # SGLang's cache namespaces the caller gave (``extra_key``, ``cache_salt``), sent with every chunk
    cache_scope: dict[str, str] | None = None
    # The LoRA adapter every chunk runs under (SGLang's ``lora_path``: an adapter's name), and the
    # frontend's count of loads and unloads of that adapter when the sample's tokens began: a sample
    # whose chunks ran under two versions of its adapter is generated again, as for the model's weights.
    lora_path: str | None = None
    adapter_version: int | None = None
    # Image, video or audio inputs (SGLang's fields, as one request sends them), sent with every chunk;
    # the instance expands the prompt's placeholders from them, so its prompt holds more tokens there
    # than ``prompt_ids``: ``reported_prompt_tokens`` is its count, from the chunk that prefilled it.
    media: dict[str, Any] | None = None
    reported_prompt_tokens: int | None = None
    # Routing replay (SGLang's ``return_routed_experts``): the first position whose routings the caller
    # wants (``routed_experts_start_len``), None when it wants none; then the routings so far, one
    # row per position, as SGLang's bytes (int32 [layers, top-k] per row) concatenated over chunks.
    routed_experts_start: int | None = None
    routed_experts: bytearray = field(default_factory=bytearray)
    routed_experts_rows: int = 0
    # The instances' meta_info keys that seer does not build itself (wire.passed_meta), joined over the
    # chunks: per-token lists end to end, the rest by wire.join_meta's rules.
    passed_meta: dict[str, Any] = field(default_factory=dict)
    passed_token_meta: dict[str, list[Any]] = field(default_factory=dict)
    # The instance that ran the trajectory's previous turn (its prefix is cached there), for a new
    # sample: the policy places it there when that instance has room, as a continuation stays put.
    affinity: int | None = None
    # A pause in SGLang's "abort" mode answers the sample as an abort with its tokens so far (the
    # caller resends it, as SGLang's own callers do); else the sample waits and goes on after it.
    ends_on_pause: bool = False
    # SGLang's logprob_start_len: -1 = logprobs of output tokens only; >= 0 = also of the prompt from
    # there, taken from the chunk that prefills the prompt (the first, or the first after a restart).
    input_logprob_start: int = -1
    input_logprobs: list[tuple[float | None, int]] = field(default_factory=list)
    input_top_logprobs: list[list[tuple[float, int]] | None] = field(default_factory=list)
    input_token_ids_logprobs: list[list[tuple[float, int]] | None] = field(default_factory=list)
    # Fixed for the sample's life and sent with every chunk: SGLang's seeded sampler hashes
    # (seed, position), so chunking or migrating a sample does not change what it draws.
    sampling_seed: int | None = None
    seed_key: str = ""  # the group's identity for seeds (group_seed_key); the group id when not given
    # The weight version of each run of output tokens: (version, start, end), end exclusive. One entry
    # unless the sample may continue across weight updates (then one per version it ran on).
    token_versions: list[tuple[str, int, int]] = field(default_factory=list)
    regenerations: int = 0  # times the sample restarted from its prompt because its weights changed
    on_tokens: TokenCallback | None = None
    on_done: Callable[["Sample"], None] | None = None
    submitted_at: float = field(default_factory=time.time)
    first_token_at: float | None = None
    finished_at: float | None = None

    @property
    def generated(self) -> int:
        return len(self.output_ids)

    @property
    def remaining(self) -> int:
        return self.params.max_new_tokens - self.generated

    @property
    def prompt_tokens(self) -> int:
        """The prompt's tokens as the instances count them (media placeholders expanded)."""
        return self.reported_prompt_tokens or len(self.prompt_ids)

    @property
    def context_len(self) -> int:
        """Tokens a continuation starts from (prompt + generated), without building the list."""
        return len(self.prompt_ids) + self.generated

    @property
    def positions(self) -> int:
        """The context's positions as the instances count them (media placeholders expanded): where
        SGLang's routings and ``routed_experts_start_len`` count."""
        return self.prompt_tokens + self.generated

    @property
    def context_ids(self) -> list[int]:
        """What a continuation chunk is prefilled with: prompt plus everything generated so far."""
        return self.prompt_ids + self.output_ids

    @property
    def done(self) -> bool:
        return self.state in (SampleState.FINISHED, SampleState.FAILED, SampleState.ABORTED)

    @property
    def weight_version(self) -> str | None:
        """The version the sample's tokens come from (the latest, if it ran on several)."""
        return self.token_versions[-1][0] if self.token_versions else None

    def add_versions(self, spans: list[tuple[str, int, int]]) -> bool:
        """Record the weight versions of newly generated tokens (spans in output positions, in order);
        returns whether the sample now holds tokens of more than one version."""
        for version, start, end in spans:
            if end <= start:
                continue
            last = self.token_versions[-1] if self.token_versions else None
            if last is not None and last[0] == version and last[2] == start:
                self.token_versions[-1] = (version, last[1], end)
            else:
                self.token_versions.append((version, start, end))
        return len({v for v, _, _ in self.token_versions}) > 1

    def routed_experts_from(self) -> int | None:
        """Where the next chunk's routings start (its ``routed_experts_start_len``), or None. A chunk
        answers for positions [start, its context + new tokens - 1): the last token it samples has not
        been through the model yet. So a continuation starts at its context's last position, the
        token the previous chunk sampled, and the chunks' rows join end to end."""
        if self.routed_experts_start is None:
            return None
        return self.routed_experts_start if self.generated == 0 else self.positions - 1

    def add_routed_experts(self, raw: bytes) -> None:
        """Append a chunk's routings, read after its tokens were added: the sample then holds the rows
        of positions [start, context - 1)."""
        self.routed_experts += raw
        self.routed_experts_rows = max(0, self.positions - 1 - (self.routed_experts_start or 0))

    def routed_experts_bytes(self) -> bytes:
        """The routings of positions [start, prompt + output - 1), as one unchunked request answers
        them; rows past the last output token are dropped (a stop string found across chunks)."""
        if not self.routed_experts_rows:
            return b""
        row = len(self.routed_experts) // self.routed_experts_rows
        want = max(0, self.positions - 1 - (self.routed_experts_start or 0))
        return bytes(self.routed_experts[:row * min(want, self.routed_experts_rows)])

    def routed_experts_base64(self) -> str:
        """``routed_experts_bytes`` as SGLang's ``meta_info.routed_experts`` carries them."""
        return base64.b64encode(self.routed_experts_bytes()).decode()

    def add_meta(self, passed: dict[str, Any], base: int) -> None:
        """Join a chunk's passed meta_info keys (read after its tokens were added; ``base``: the
        sample's tokens before the chunk)."""
        join_meta(self.passed_meta, self.passed_token_meta, passed, base, self.generated - base)

    def meta(self) -> dict[str, Any]:
        """The passed keys as one unchunked request answers them: per-token lists as long as the output."""
        out = dict(self.passed_meta)
        for key, values in self.passed_token_meta.items():
            out[key] = values[:self.generated] + [None] * (self.generated - len(values))
        return out

    def keep_tokens(self, keep: int) -> None:
        """Drop the output past its first ``keep`` tokens, with their per-token returns."""
        for per_token in (self.output_ids, self.logprobs, self.top_logprobs, self.token_ids_logprobs,
                          self.sampling_masks, self.sampling_logprobs, *self.passed_token_meta.values()):
            del per_token[keep:]

    def restart(self) -> None:
        """Drop every generated token: the sample is generated again from its prompt (its seed stays,
        so on the same weights it would draw the same tokens)."""
        self.output_ids.clear()
        self.logprobs.clear()
        self.top_logprobs.clear()
        self.token_ids_logprobs.clear()
        self.sampling_masks.clear()
        self.sampling_logprobs.clear()
        self.passed_meta.clear()
        self.passed_token_meta.clear()
        self.token_versions.clear()
        self.routed_experts.clear()
        self.routed_experts_rows = 0
        self.adapter_version = None
        self.finish_reason = self.matched_stop = None
        self.pool_tokens = 0
        self.regenerations += 1

    def __post_init__(self) -> None:
        if self.sampling_seed is None:
            self.sampling_seed = derive_seed(self.params.seed, self.seed_key or self.group_id, self.index)


@dataclass
class Group:
    """A prompt group: the G samples of one prompt, which write alike in length and text."""

    group_id: str
    prompt_ids: list[int]
    samples: list[Sample]
    created_at: float = field(default_factory=time.time)

    @property
    def done(self) -> bool:
        return all(s.done for s in self.samples)

    @classmethod
    def make(cls, group_id: str, prompt_ids: list[int], n: int, params: SamplingParams,
             oracle_lengths: list[int] | None = None,
             custom_params: list[dict[str, Any]] | None = None, seed_key: str = "") -> "Group":
        samples = [
            Sample(rid=sample_rid(group_id, i), group_id=group_id, index=i, prompt_ids=list(prompt_ids),
                   params=params, is_probe=(i == 0), seed_key=seed_key,
                   oracle_length=oracle_lengths[i] if oracle_lengths else None,
                   custom_params=custom_params[i] if custom_params else None)
            for i in range(n)
        ]
        return cls(group_id=group_id, prompt_ids=list(prompt_ids), samples=samples)
