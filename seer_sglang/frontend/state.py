"""Frontend state shared by the API routes: validation, prompt → group, sample → JSON."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterable

from ..core.accounting import chunk_sources, spec_totals
from ..core.migration import MigrationCost
from ..config import FRONTEND
from ..core.request import Group, Sample, SampleState, SamplingParams, group_seed_key
from ..wire import SPEC_ALGORITHM, ChunkJSON, SampleJSON, sample_rid
from .engine import NoHealthyInstance, RolloutEngine
from .errors import APIError
from .grouping import SampleGrouper
from .kv_pool import PoolAccess
from .metrics import Metrics
from .native import NativeSample
from .payloads import tensor_entries_problem
from .tokenizer import PromptTokenizer

logger = logging.getLogger("seer_sglang.frontend")


@dataclass
class ModelInfo:
    served_name: str
    model_path: str
    context_length: int
    tp_size: int = 1  # GPUs (TP ranks) per instance: a weight update addresses K x tp_size ranks
    page_size: int | None = None  # tokens per KV page on the instances: chunk ends are aligned to it
    # What the instances were started with (None: not known yet, the instance's answer decides)
    lora: bool | None = None  # --enable-lora / --lora-paths
    routed_experts: bool | None = None  # --enable-return-routed-experts
    media: bool | None = None  # the model takes images (or audio)
    speculative: str | None = None  # the instances' --speculative-algorithm (SEER: seer's drafting)
    sampling_mask_max_tokens: int | None = None  # SGLang's --sampling-mask-max-tokens

    def aliases(self) -> set[str]:
        return {self.served_name, self.model_path, os.path.basename(self.model_path.rstrip("/"))}


class Frontend:
    def __init__(self, engine: RolloutEngine, tokenizer: PromptTokenizer, model: ModelInfo, metrics: Metrics,
                 pool: PoolAccess | None = None, group_window_s: float = FRONTEND.group_window_ms / 1000,
                 max_request_samples: int = FRONTEND.max_request_samples,
                 max_samples_in_flight: int = FRONTEND.max_samples_in_flight,
                 instance_args: dict[str, Any] | None = None, move_cost: MigrationCost | None = None):
        self.instance_args = instance_args or {}  # InstanceClient's keys and config, for instances added later
        self.move_cost = move_cost  # every policy's price of a move (None: the policy's fixed defaults)
        self.max_request_samples = max_request_samples
        self.max_samples_in_flight = max_samples_in_flight
        self.engine = engine
        self.tokenizer = tokenizer
        self.model = model
        self.metrics = metrics
        self.pool = pool or PoolAccess()
        self._group_counter = itertools.count()
        self.grouper = SampleGrouper(group_window_s, self.form_group)
        # The rids of /generate samples in flight, waiting for their group or in it: a rid names one
        # sample at a time, as in SGLang.
        self.native_rids: dict[str, NativeSample] = {}
        self._live_groups: dict[str, Group] = {}  # group key of per-sample requests -> its running group
        # trajectory key (session_id, routing key) -> the instance of its last turn, latest used last
        self.trajectories: collections.OrderedDict[str, int] = collections.OrderedDict()
        self.max_trajectories = 65536
        self.weight_session_open = False  # a trainer's /begin_weight_update without its /end_weight_update yet
        # The trainer's weights since launch: None while the instances run the launch weights; else the
        # last update's route and body (a restarted instance loads them again when they came from disk).
        self.last_update: tuple[str, dict[str, Any]] | None = None
        # LoRA adapters loaded through this frontend (name -> SGLang's load route and body), for instances
        # that start later: a restarted or newly registered instance loads them before it takes work
        self.adapters: dict[str, tuple[str, dict[str, Any]]] = {}
        self.held: dict[int, str] = {}  # instances out of dispatch after a restart, and why
        self.shutting_down = False

    def hold(self, index: int) -> None:
        """An instance process exited: no chunk goes to it until ``readmit_restarted`` says so."""
        self.held[index] = "restarting"
        self.engine.instances.remove(index)

    async def readmit_restarted(self, index: int, timeout_s: float = 900.0) -> None:
        """A restarted instance runs its launch weights. Once it answers, it gets the trainer's last
        update again if that came from disk; one that cannot (tensor or NCCL updates, which cannot be
        replayed) stays out of dispatch, and ``/health`` says why: a sample drawn on other weights than
        its siblings would be off-policy."""
        client = self.engine.instances.clients[index]
        deadline = time.monotonic() + timeout_s
        while not await client.healthy():
            if time.monotonic() > deadline:
                self.held[index] = "did not answer after its restart"
                return
            await asyncio.sleep(1.0)
        if self.last_update is not None:
            path, body = self.last_update
            if path != "/update_weights_from_disk":
                self.held[index] = (f"restarted on its launch weights; the last update ({path}) cannot be "
                                    f"replayed: it takes work again after the next /update_weights_from_disk")
                logger.error("instance %d: %s", index, self.held[index])
                return
            status, answer = await client.post_admin(path, body)
            if status != 200:
                self.held[index] = f"restarted, but reloading the current weights failed: {answer}"
                logger.error("instance %d: %s", index, self.held[index])
                return
            logger.info("instance %d reloaded weights %s after its restart", index, body.get("weight_version"))
        problem = await self.load_adapters(client)
        if problem is not None:
            self.held[index] = f"restarted, but {problem}"
            logger.error("instance %d: %s", index, self.held[index])
            return
        del self.held[index]
        await self.engine.instances.readmit(index)
        logger.info("instance %d takes work again after its restart", index)

    async def load_adapters(self, client) -> str | None:
        """Load the adapters loaded through this frontend on an instance that started after them (one that
        left and joins again still holds them); returns what failed, or None. Tensors are checked again
        first: their shared memory may be gone by now, and an instance that opens a missing file dies."""
        if not self.adapters:
            return None
        status, models = await client.get("/v1/models")
        held = {m.get("id") for m in models.get("data", [])} if status == 200 and isinstance(models, dict) else set()
        for name, (path, body) in self.adapters.items():
            if name in held:
                continue
            if path == "/load_lora_adapter_from_tensors":
                problem = tensor_entries_problem(body.get("serialized_named_tensors", []), [client.url])
                if problem is not None:
                    return f"LoRA adapter {name!r} came from tensors it cannot read now ({problem}): load it again"
            status, answer = await client.post_admin(path, body)
            if status != 200:
                return f"loading LoRA adapter {name!r} failed: {answer}"
        return None

    def begin_shutdown(self) -> None:
        """The server was told to stop: every sample still running fails with a 503 that says so, and new
        requests get one too, while the server lets its answers out before it closes."""
        self.shutting_down = True
        failed = self.engine.fail_all("the server is shutting down before this sample finished; send it again", 503)
        logger.warning("shutting down: %d unfinished samples answered with 503", failed)

    # ---- validation ------------------------------------------------------------------------
    def check_model(self, name: str | None, lora_path: str | None = None) -> str | None:
        """The LoRA adapter a request runs under, as SGLang reads it: any model name means the served
        model (clients send ``default`` or a label of their own), and ``<model>:<adapter>`` names an
        adapter, before the request's own ``lora_path``."""
        adapter, param = lora_path, "lora_path"
        if name and ":" in name and name not in self.model.aliases():
            served = self.model.served_name
            named = (name[len(served) + 1:] if name.startswith(f"{served}:") else name.split(":", 1)[1]).strip()
            adapter, param = (named, "model") if named else (lora_path, param)
        self.check_adapters([adapter], param)
        return adapter

    def check_adapters(self, adapters: Iterable[str | None], param: str = "lora_path") -> None:
        """Adapters only where the instances run LoRA (SGLang's ``--enable-lora``)."""
        used = next((a for a in adapters if a is not None), None)
        if used is not None:
            self.check_lora_enabled(f"LoRA adapter {used!r} asked for", param)

    def check_lora_enabled(self, what: str = "a LoRA adapter call", param: str | None = None) -> None:
        if self.model.lora is False:
            raise APIError(f"{what}, but the instances run without LoRA: start the server with --enable-lora "
                           "(and --lora-paths, or load adapters with POST /load_lora_adapter)", 400,
                           param=param, code="lora_not_enabled")

    def check_native(self, natives: list[NativeSample]) -> None:
        """What a ``/generate`` body asks of the instances that they were started without."""
        self.check_adapters(n.lora_path for n in natives)
        for n in natives:
            self.check_media(n.media)
            self.check_routed_experts(n.routed_experts_start is not None)
            self.check_sampling_mask(n.params)

    def check_media(self, media: dict[str, Any] | None) -> None:
        """Media only for a model that takes them: plain SGLang would drop them in silence."""
        if media and self.model.media is False:
            field = next(iter(media))
            raise APIError(f"{field} given, but {self.model.served_name} takes no images or audio", 400,
                           param=field, code="media_not_supported")

    def check_routed_experts(self, asked: bool) -> None:
        """Routings only where the instances capture them."""
        if asked and self.model.routed_experts is False:
            raise APIError("return_routed_experts asked for, but the instances run without it: start the server "
                           "with --enable-return-routed-experts", 400, param="return_routed_experts",
                           code="routed_experts_not_enabled")

    def check_sampling_mask(self, params: SamplingParams) -> None:
        """A sampling support only where the instances can give one for every token, as SGLang's scheduler
        decides (it would abort the request on the instance): under no speculative algorithm but seer's
        (whose instances decode such a request without drafts), and only for a finite top-k within
        ``--sampling-mask-max-tokens`` (greedy sampling is top-k 1)."""
        if params.sampling_mask is None:
            return
        if self.model.speculative and self.model.speculative != SPEC_ALGORITHM:
            raise APIError(f"return_sampling_mask is not supported with the instances' speculative algorithm "
                           f"{self.model.speculative} (as in SGLang)", param="return_sampling_mask",
                           code="sampling_mask_with_speculation")
        cap = self.model.sampling_mask_max_tokens or 4096
        top_k = 1 if params.temperature == 0 else params.top_k
        if top_k != 1 and not 1 < top_k <= cap:
            raise APIError(f"return_sampling_mask needs top_k = 1 or 1 < top_k <= {cap} (the instances' "
                           f"--sampling-mask-max-tokens); got top_k = {params.top_k}", param="sampling_params.top_k")

    def check_open(self) -> None:
        if self.shutting_down:
            raise APIError("the server is shutting down", 503, type_="server_error", code="shutting_down")

    def check_available(self) -> None:
        self.check_open()
        if self.engine.router.healthy_count() == 0:
            raise APIError("no healthy SGLang instance is available", 503, type_="server_error",
                           code="no_healthy_instance")

    def check_samples(self, count: int) -> None:
        """One request's samples, and all those the server holds with them, within the bounds."""
        if count > self.max_request_samples:
            raise APIError(f"the request asks for {count} samples (prompts x n); at most "
                           f"{self.max_request_samples} per request (--max-request-samples)", param="n",
                           code="too_many_samples")
        held = self.engine.buffer.live_samples()
        if held + count > self.max_samples_in_flight:
            raise APIError(f"the server holds {held} samples and takes at most {self.max_samples_in_flight} "
                           f"(--max-samples-in-flight); retry once some finish", 429, type_="rate_limit_error",
                           code="server_full")

    def check_prompt(self, ids: list[int], max_tokens: int, param: str = "prompt",
                     budget_param: str = "max_tokens") -> None:
        """The prompt's tokens and the new-token budget (named ``budget_param``) against the model."""
        ctx = self.model.context_length
        budget = budget_param.rsplit(".", 1)[-1]
        if not ids:
            raise APIError("the prompt is empty", param=param)
        bad = next((t for t in ids if not isinstance(t, int) or t < 0 or t >= self.tokenizer.vocab_size), None)
        if bad is not None:
            raise APIError(f"token id {bad} is outside the vocabulary [0, {self.tokenizer.vocab_size})", param=param)
        if len(ids) >= ctx:
            raise APIError(f"the prompt has {len(ids)} tokens; the model's context length is {ctx}",
                           param=param, code="context_length_exceeded")
        if max_tokens > ctx:
            raise APIError(f"{budget}={max_tokens} is above the model's context length {ctx}",
                           param=budget_param, code="context_length_exceeded")
        if len(ids) + max_tokens > ctx:
            raise APIError(f"prompt ({len(ids)} tokens) + {budget} ({max_tokens}) exceeds the model's "
                           f"context length {ctx}", param=budget_param, code="context_length_exceeded")

    # ---- building work ---------------------------------------------------------------------
    def new_group_id(self, requested: str | None, suffix: str = "") -> str:
        if requested:
            gid = requested + suffix
            if self.engine.running_group(gid):
                raise APIError(f"group_id {gid!r} is already running", 409, param="group_id")
            return gid
        return f"g{next(self._group_counter)}-{uuid.uuid4().hex[:8]}"

    def encode_messages(self, messages: list[Any], param: str = "messages") -> list[int]:
        try:
            return self.tokenizer.encode_chat([m.model_dump(exclude_none=True) for m in messages])
        except Exception as e:  # template errors are the caller's input
            raise APIError(f"cannot apply the chat template: {e}", param=param) from e

    @staticmethod
    def media_of(messages: list[Any], image_data: list[str] | None = None,
                 video_data: list[str] | None = None) -> dict[str, Any] | None:
        """The media of a prompt: ``image_data`` and ``video_data`` given beside it, after the images and
        videos of its messages' ``image_url`` and ``video_url`` parts in order (OpenAI's form, which
        SGLang's chat route reads)."""
        found: dict[str, list[str]] = {"image_data": [], "video_data": []}
        for message in messages or []:
            content = message.content if hasattr(message, "content") else message.get("content")
            for part in content if isinstance(content, list) else []:
                for kind, field in (("image_url", "image_data"), ("video_url", "video_data")):
                    if isinstance(part, dict) and part.get("type") == kind:
                        ref = part.get(kind)
                        url = ref.get("url") if isinstance(ref, dict) else ref
                        if not isinstance(url, str) or not url:
                            raise APIError(f"a {kind} part needs {kind}.url", param="messages")
                        found[field].append(url)
        found["image_data"] += image_data or []
        found["video_data"] += video_data or []
        return {k: v for k, v in found.items() if v} or None

    def make_group(self, prompt_ids: list[int], n: int, params: SamplingParams, group_id: str, *,
                   position: int, requested_id: str | None = None, oracle_lengths: list[int] | None = None,
                   custom_params: list[dict[str, Any]] | None = None, lora_path: str | None = None,
                   routed_experts_start: int | None = None, media: dict[str, Any] | None = None) -> Group:
        """The group of the prompt at ``position`` in its request; its seeds are keyed by the group id the
        caller asked for, else by that position and the prompt (``core.request.group_seed_key``)."""
        for name, values in (("oracle_lengths", oracle_lengths), ("custom_params", custom_params)):
            if values is not None and len(values) != n:
                raise APIError(f"{name} has {len(values)} entries for n={n}", param=name)
        group = Group.make(group_id, prompt_ids, n, params, oracle_lengths, custom_params,
                           group_seed_key(prompt_ids, position, requested_id))
        for sample in group.samples:
            sample.lora_path, sample.routed_experts_start, sample.media = lora_path, routed_experts_start, media
        return group

    def form_group(self, key: str, natives: list[NativeSample]) -> Group:
        """Per-sample ``/generate`` requests with the same prompt and settings (``key``) as one group:
        they join the group of their key while it runs, else form a new one."""
        self.check_available()
        group = self._live_groups.get(key)
        before = 0
        if group is not None and self.engine.running_group(group.group_id):
            before = len(group.samples)
            self._join(group, self._samples(group.group_id, before, natives))
        else:
            gid = self.new_group_id(None)
            group = Group(group_id=gid, prompt_ids=list(natives[0].prompt_ids), samples=self._samples(gid, 0, natives))
            self.submit([group])
            self.metrics.generate_groups.inc()
            self._forget_done_groups()
            self._live_groups[key] = group
        after = len(group.samples)
        self.metrics.generate_grouped_samples.inc((after if after > 1 else 0) - (before if before > 1 else 0))
        for n in natives:
            n.group = group
            if n.abandoned:
                self.engine.abort_sample(n.sample)
        return group

    def _samples(self, gid: str, first: int, natives: list[NativeSample]) -> list[Sample]:
        for k, n in enumerate(natives, start=first):
            n.sample = Sample(rid=sample_rid(gid, k), group_id=gid, index=k, prompt_ids=list(n.prompt_ids),
                              params=n.params, is_probe=(k == 0), sampling_seed=n.sampling_seed,
                              custom_params=n.custom_params, input_logprob_start=n.logprob_start,
                              cache_scope=n.cache_scope, ends_on_pause=True, lora_path=n.lora_path,
                              routed_experts_start=n.routed_experts_start, media=n.media,
                              affinity=self.trajectories.get(n.trajectory) if n.trajectory is not None else None,
                              on_tokens=n.on_tokens, on_done=n.on_done)
        return [n.sample for n in natives]

    def _join(self, group: Group, samples: list[Sample]) -> None:
        self.check_samples(len(samples))
        try:
            self.engine.add_samples(group, samples)
        except NoHealthyInstance as e:
            raise APIError(str(e), 503, type_="server_error", code="no_healthy_instance") from e

    def _forget_done_groups(self) -> None:
        if len(self._live_groups) > 2 * len(self.engine.buffer.groups) + 64:
            self._live_groups = {k: g for k, g in self._live_groups.items() if self.engine.running_group(g.group_id)}

    def check_rids(self, natives: list[NativeSample]) -> None:
        """Take the rids of a ``/generate`` call's samples; one already in flight, or given twice, is
        refused as SGLang refuses it. They are the call's until ``forget_samples``."""
        seen: set[str] = set()
        for n in natives:
            held = self.native_rids.get(n.rid)
            in_flight = held is not None and not (held.sample is not None and held.sample.done)
            if in_flight or n.rid in seen:
                raise APIError(f"Duplicate request ID detected: {n.rid}", param="rid", code="duplicate_rid")
            seen.add(n.rid)
        for n in natives:
            self.native_rids[n.rid] = n

    def forget_samples(self, natives: list[NativeSample]) -> None:
        """The call is over: its rids are free, and each trajectory remembers where its turn ran."""
        for n in natives:
            if self.native_rids.get(n.rid) is n:
                del self.native_rids[n.rid]
            if n.trajectory is not None and n.sample is not None and n.sample.chunks:
                self.trajectories[n.trajectory] = n.sample.chunks[-1].instance
                self.trajectories.move_to_end(n.trajectory)
                if len(self.trajectories) > self.max_trajectories:
                    self.trajectories.popitem(last=False)

    def abort_all(self) -> int:
        """SGLang's abort of everything: every sample in flight or queued, and every ``/generate``
        sample still waiting for its group, ends as an abort with its tokens so far."""
        for native in self.grouper.waiting():
            native.abandoned = True
        return self.engine.abort_all()

    def find_samples(self, rid: str) -> list[Sample]:
        """Samples named exactly by a group id, a sample rid, or a rid a ``/generate`` caller gave; a
        sample still waiting for its group is dropped from it. Never a prefix: one abort must not
        reach other callers' requests."""
        found = self.engine.find(rid)
        if found:
            return found
        native = self.native_rids.get(rid)
        if native is None:
            return []
        if native.sample is None:
            native.abandoned = True
            return []
        return [native.sample]

    def submit(self, groups: list[Group]) -> None:
        self.check_available()
        self.check_samples(sum(len(g.samples) for g in groups))
        try:
            for group in groups:
                self.engine.submit(group)
        except NoHealthyInstance as e:
            for group in groups:
                self.engine.abort_group(group.group_id)
            raise APIError(str(e), 503, type_="server_error", code="no_healthy_instance") from e

    # ---- results ---------------------------------------------------------------------------
    @staticmethod
    def raise_if_failed(samples: Iterable[Sample]) -> None:
        """The first failed sample's error, as the answer to the request."""
        for s in samples:
            if s.state == SampleState.FAILED:
                raise APIError(s.error or "generation failed", s.error_status if s.error_status < 600 else 500,
                               type_="invalid_request_error" if s.error_status < 500 else "server_error")

    def sample_json(self, sample: Sample, prompt_index: int) -> dict[str, Any]:
        end = sample.finished_at or time.time()
        return SampleJSON(
            prompt_index=prompt_index, group_id=sample.group_id, index=sample.index, rid=sample.rid,
            output_ids=sample.output_ids, text=self.tokenizer.sample_text(sample),
            logprobs=sample.logprobs if sample.params.logprobs else None,
            top_logprobs=([[list(p) for p in step] for step in sample.top_logprobs]
                          if sample.params.top_logprobs else None),
            finish_reason=sample.finish_reason, error=sample.error, prompt_tokens=len(sample.prompt_ids),
            completion_tokens=sample.generated, submitted_at=sample.submitted_at,
            first_token_s=(sample.first_token_at - sample.submitted_at) if sample.first_token_at else None,
            latency_s=end - sample.submitted_at, spec=spec_totals([sample]),
            weight_version=sample.weight_version, regenerations=sample.regenerations,
            routed_experts=sample.routed_experts_base64() if sample.routed_experts_start is not None else None,
            sampling_mask=sample.sampling_masks if sample.params.sampling_mask is not None else None,
            sampling_logprobs=sample.sampling_logprobs if sample.params.sampling_mask is not None else None,
            weight_versions=[list(span) for span in sample.token_versions] if len(sample.token_versions) > 1 else None,
            chunks=[ChunkJSON(instance=c.instance, start=c.start, end=c.end, tokens=c.new_tokens,
                              cached_tokens=c.cached_tokens, kv=chunk_sources(c),
                              spec={"draft_steps": c.draft_steps, "accepted_tokens": c.accepted_tokens},
                              weight_version=c.weight_version)
                    for c in sample.chunks],
        ).to_json()
