"""Request bodies of the frontend: OpenAI-compatible completions/chat, and the batch rollout API."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


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

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class _Sampling(SamplingFields):
    """The OpenAI endpoints: unknown fields are ignored, as OpenAI clients send extras."""

    model_config = ConfigDict(extra="ignore")

    max_tokens: Optional[int] = Field(None, ge=1)
    group_id: Optional[str] = Field(None, min_length=1, max_length=256)


class StreamOptions(BaseModel):
    include_usage: bool = False


class CompletionRequest(_Sampling):
    prompt: Union[str, list[int], list[str], list[list[int]]]
    logprobs: Optional[int] = Field(None, ge=0, le=20)
    echo: bool = False
    stream_options: Optional[StreamOptions] = None


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


class RolloutPrompt(BaseModel):
    """One prompt of a rollout batch: exactly one of text, messages or token ids."""

    model_config = ConfigDict(extra="forbid")

    text: Optional[str] = None
    messages: Optional[list[ChatMessage]] = None
    input_ids: Optional[list[int]] = None
    n: Optional[int] = Field(None, ge=1, le=1024)
    group_id: Optional[str] = Field(None, min_length=1, max_length=256)
    # Benchmarks only: the true length of each sample, read by the oracle policy and nobody else.
    oracle_lengths: Optional[list[int]] = None
    # One dict per sample for the request's custom logit processor; passed through untouched.
    custom_params: Optional[list[dict[str, Any]]] = None


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


class AbortRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    rid: str = ""
    abort_all: bool = False


PromptKind = Literal["text", "messages", "input_ids"]


class SchedulerRequest(BaseModel):
    """BENCHMARKS ONLY: ``POST /scheduler`` (``routes/benchmarking.py``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    chunk_size: Optional[int] = Field(None, ge=1)
    kv_headroom: Optional[float] = Field(None, gt=0.0, le=1.0)
    starvation_bound: Optional[int] = Field(None, ge=1)
