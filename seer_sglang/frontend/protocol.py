"""Request bodies of the frontend: OpenAI-compatible completions/chat, and the batch rollout API."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import SCHEDULERS
from ..core.request import SamplingParams
from ..core.slo import SLO
from ..wire import reserved_param
from .errors import APIError


class SLOField(BaseModel):
    """A request's service objectives beside a rollout. A request with one runs whole on one instance,
    decodes by credit (its TPOT SLO against the others') and goes first in the prefill queue by
    deadline; one that cannot meet it is refused with 429. Without one a request is best-effort."""

    model_config = ConfigDict(extra="forbid")

    # From 1 us: a smaller positive value would come to 0 s once converted.
    ttft_ms: Optional[float] = Field(None, ge=1e-3, le=3.6e6, description="time to first token, in ms")
    tpot_ms: Optional[float] = Field(None, ge=1e-3, le=6e4, description="mean time per output token, in ms")

    def to_slo(self) -> SLO | None:
        if self.ttft_ms is None and self.tpot_ms is None:
            return None
        return SLO(ttft_s=None if self.ttft_ms is None else self.ttft_ms / 1e3,
                   tpot_s=None if self.tpot_ms is None else self.tpot_ms / 1e3)


class SamplingFields(BaseModel):
    """Sampling fields shared by every generation endpoint (OpenAI names)."""

    model: Optional[str] = None
    n: int = Field(1, ge=1, le=1024)
    temperature: float = Field(1.0, ge=0.0, le=100.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)
    stop: Optional[Union[str, list[str]]] = None
    stop_token_ids: Optional[list[int]] = None
    seed: Optional[int] = None
    ignore_eos: bool = False
    stream: bool = False
    # Penalties count the sample's whole output, across chunks and instances (the plugin adds the
    # earlier chunks' tokens to SGLang's penalizers); min_tokens counts from the sample's start.
    # Bounds as SGLang's SamplingParams.verify; null means unset, as OpenAI clients send it.
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: Optional[float] = Field(None, gt=0.0, le=2.0)
    min_tokens: Optional[int] = Field(None, ge=0)
    # OpenAI's: token id (as a string) -> bias added to its logit before sampling, in [-100, 100].
    logit_bias: Optional[dict[str, float]] = None
    slo: Optional[SLOField] = None
    # SGLang's: the LoRA adapter (a loaded adapter's name) the samples run under; ``model:
    # "<model>:<adapter>"`` names one too, and wins, as in SGLang
    lora_path: Optional[str] = Field(None, min_length=1)

    @field_validator("logit_bias")
    @classmethod
    def _bias_keys_are_token_ids(cls, bias: Optional[dict[str, float]]) -> Optional[dict[str, float]]:
        for key, value in (bias or {}).items():
            if not key.strip().isdigit():
                raise ValueError(f"logit_bias keys are token ids, got {key!r}")
            if not -100.0 <= value <= 100.0:
                raise ValueError(f"logit_bias values are in [-100, 100], got {value} for token {key}")
        return bias or None

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def sampling_params(self, max_new_tokens: int, vocab_size: int, **kwargs: Any) -> SamplingParams:
        """The sample's settings from these fields (``kwargs``: what differs by endpoint)."""
        if (self.min_tokens or 0) > max_new_tokens:
            raise APIError(f"min_tokens ({self.min_tokens}) exceeds the maximum number of new tokens "
                           f"({max_new_tokens})", param="min_tokens")
        bias = {str(int(k)): v for k, v in (self.logit_bias or {}).items()}
        outside = next((k for k in bias if int(k) >= vocab_size), None)
        if outside is not None:
            raise APIError(f"logit_bias token id {outside} is outside the vocabulary [0, {vocab_size})",
                           param="logit_bias")
        return SamplingParams(
            max_new_tokens=max_new_tokens, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            stop=self.stop_list(), stop_token_ids=list(self.stop_token_ids or []), seed=self.seed,
            ignore_eos=self.ignore_eos, frequency_penalty=self.frequency_penalty or 0.0,
            presence_penalty=self.presence_penalty or 0.0,
            repetition_penalty=1.0 if self.repetition_penalty is None else self.repetition_penalty,
            min_tokens=self.min_tokens or 0, logit_bias=bias or None,
            slo=self.slo.to_slo() if self.slo is not None else None, **kwargs)


# Fields of SGLang's OpenAI protocol that change what is sampled (or the prompt it is sampled from),
# with the values that leave it unchanged. seer does not yet apply them identically across chunks
# and speculative verification, so a request that sets one is refused, never served without it.
_NOT_HONOURED: dict[str, tuple[tuple[Any, ...], str]] = {
    "min_p": ((0, 0.0, None), "SGLang's seeded sampler, which keeps chunked and migrated samples identical "
              "to unchunked ones, does not implement min_p"),
    **{name: ((None,), "constrained decoding is not supported") for name in
       ("regex", "ebnf", "json_schema", "stop_regex")},
    "response_format": ((None, {"type": "text"}), "constrained decoding is not supported"),
    "custom_logit_processor": ((None,), "use POST /v1/rollout, which passes it to every chunk"),
    "custom_params": ((None,), "use POST /v1/rollout, which passes it to every chunk"),
    "best_of": ((None, 1), "use n"),
    "suffix": ((None, ""), "insertion is not supported"),
    "tools": ((None, []), "tool calling is not supported"),
    "chat_template_kwargs": ((None, {}), "the chat template takes no arguments here"),
    "continue_final_message": ((False, None), "the prompt always ends with a new assistant turn here"),
    "reasoning_effort": ((None,), "reasoning controls are not supported"),
    "thinking": ((None,), "reasoning controls are not supported"),
    "no_stop_trim": ((False, None), "stop strings are always trimmed here"),
}

# Fields of SGLang's OpenAI protocol that change neither the tokens sampled nor what is returned, so
# they are accepted whatever their value: attribution, routing and cache hints.
_INERT = frozenset({"user", "priority", "rid", "extra_key", "cache_salt", "data_parallel_rank", "routed_dp_rank",
                    "disagg_prefill_dp_rank", "custom_labels", "tool_choice", "parallel_tool_calls"})


def _sglang_model(name: str) -> Any:
    """SGLang's own request model of that name (``sglang.srt.entrypoints.openai.protocol``)."""
    from sglang.srt.entrypoints.openai import protocol

    return getattr(protocol, name)


class _Sampling(SamplingFields):
    """The OpenAI endpoints. OpenAI clients send extras (``user``, ``metadata``...), which are
    accepted; a field that would change what is sampled is honoured or refused, never ignored."""

    model_config = ConfigDict(extra="allow")

    max_tokens: Optional[int] = Field(None, ge=1)
    group_id: Optional[str] = Field(None, min_length=1, max_length=256)
    skip_special_tokens: bool = True

    def refused_field(self) -> tuple[str, str] | None:
        """The first field set to a value seer cannot honour exactly, and why. Every field of SGLang's
        own model of the request that seer does not declare is refused away from SGLang's default
        (unless it is inert), so a field SGLang adds is never dropped in silence."""
        sglang_fields = _sglang_model(type(self).__name__).model_fields
        for name, value in (self.model_extra or {}).items():
            rule = _NOT_HONOURED.get(name)
            if rule is not None:
                if value not in rule[0]:
                    return name, rule[1]
            elif name in sglang_fields and name not in _INERT:
                if value != sglang_fields[name].get_default(call_default_factory=True):
                    return name, "these routes do not apply it"
        return None


class StreamOptions(BaseModel):
    include_usage: bool = False


class CompletionRequest(_Sampling):
    prompt: Union[str, list[int], list[str], list[list[int]]]
    logprobs: Optional[int] = Field(None, ge=0, le=20)
    echo: bool = False
    stream_options: Optional[StreamOptions] = None

    def refused_field(self) -> tuple[str, str] | None:
        if self.echo:
            return "echo", "the prompt is not returned with the completion here"
        if self.stream and self.logprobs is not None:
            return "logprobs", "streamed chunks carry no logprobs here; ask for them without stream"
        return super().refused_field()


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: Optional[Union[str, list[dict[str, Any]]]] = None


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    stream_options: Optional[StreamOptions] = None

    def refused_field(self) -> tuple[str, str] | None:
        if self.stream and self.logprobs:
            return "logprobs", "streamed chunks carry no logprobs here; ask for them without stream"
        return super().refused_field()


class RolloutPrompt(BaseModel):
    """One prompt of a rollout batch: exactly one of text, messages or token ids."""

    # the schema says what the route checks: one prompt field exactly (``routes/rollout.py``)
    model_config = ConfigDict(extra="forbid", json_schema_extra={"oneOf": [
        {"required": [k], "not": {"anyOf": [{"required": [o]} for o in ("text", "messages", "input_ids") if o != k]}}
        for k in ("text", "messages", "input_ids")]})

    text: Optional[str] = Field(None, min_length=1)
    messages: Optional[list[ChatMessage]] = Field(None, min_length=1)
    input_ids: Optional[list[Annotated[int, Field(ge=0)]]] = Field(None, min_length=1)
    n: Optional[int] = Field(None, ge=1, le=1024)
    group_id: Optional[str] = Field(None, min_length=1, max_length=256)
    # SGLang's media inputs (a URL, a file path or base64 each), for a prompt whose text or ids hold
    # their placeholders; images in ``messages`` are taken from their image_url parts
    image_data: Optional[list[str]] = Field(None, min_length=1)
    video_data: Optional[list[str]] = Field(None, min_length=1)
    # Benchmarks only: the true length of each sample, read by the oracle policy and nobody else.
    oracle_lengths: Optional[list[int]] = None
    # One dict per sample for the request's custom logit processor; passed through untouched.
    custom_params: Optional[list[dict[str, Any]]] = None

    @field_validator("custom_params")
    @classmethod
    def _no_reserved_keys(cls, params: Optional[list[dict[str, Any]]]) -> Optional[list[dict[str, Any]]]:
        for i, entry in enumerate(params or []):
            key = reserved_param(entry)
            if key is not None:
                raise ValueError(f"custom_params[{i}].{key} is reserved for seer_sglang's own use")
        return params


class RolloutRequest(SamplingFields):
    """The batch rollout API: strict, so a misspelled field is an error rather than ignored."""

    model_config = ConfigDict(extra="forbid")

    prompts: list[Union[str, RolloutPrompt]] = Field(min_length=1)
    max_tokens: int = Field(256, ge=1)
    logprobs: bool = True
    top_logprobs: int = Field(0, ge=0, le=20)
    skip_special_tokens: bool = True
    return_timeline: bool = False  # add the per-instance telemetry recorded during the rollout
    custom_logit_processor: Optional[str] = None  # SGLang CustomLogitProcessor.to_str()
    # routing replay: each sample's expert routings from its first position (SGLang's
    # return_routed_experts), in ``routed_experts``; the instances run --enable-return-routed-experts
    return_routed_experts: bool = False
    # top-p / top-k replay: each token's sampling support and behaviour logprob (SGLang's
    # return_sampling_mask and sampling_logprobs_mode), in ``sampling_mask`` / ``sampling_logprobs``
    return_sampling_mask: bool = False
    sampling_logprobs_mode: Literal["selected", "support"] = "selected"


class AbortRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    rid: str = ""
    abort_all: bool = False


PromptKind = Literal["text", "messages", "input_ids"]


class SchedulerRequest(BaseModel):
    """BENCHMARKS ONLY: ``POST /scheduler`` (``routes/benchmarking.py``)."""

    model_config = ConfigDict(extra="forbid")

    name: Literal[SCHEDULERS]  # type: ignore[valid-type]
    chunk_size: Optional[int] = Field(None, ge=1)
    kv_headroom: Optional[float] = Field(None, gt=0.0, le=4.0)
    starvation_bound: Optional[int] = Field(None, ge=1)
    whole_tail: Optional[bool] = None
    # False: the context policies serve equal length estimates in waiting order (whole groups in
    # arrival order at the start) instead of sibling by sibling across groups.
    spread_ties: Optional[bool] = None
    # Chunk ends aligned to whole pages of KV (the default when the instances page their KV); off,
    # chunks are exactly chunk_size: for experiments that compare the two or need fixed boundaries.
    align_to_pages: Optional[bool] = None
