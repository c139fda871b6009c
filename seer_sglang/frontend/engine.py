"""The rollout engine (mechanism): the sans-IO ``Router`` driven with HTTP calls to SGLang instances.

A group is split into G samples in the router's buffer. Whenever something changes (a new group, a
chunk back, an instance up or down) the router is asked for decisions; each launched chunk runs as one
``/generate`` call that continues from prompt + tokens so far. A chunk that returns unfinished goes
back to the buffer. A chunk whose instance dies is re-dispatched from the tokens already received. The
bookkeeping of all of it (claims, chunk records, finish, requeue, group done) is the router's; the
simulator drives the same router.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import logging
import time
from typing import Any, Callable

from ..config import ROLLOUT, SLO_CONFIG
from ..core.buffer import RequestBuffer
from ..core.policy import InstanceView, SchedulingPolicy
from ..core.request import ChunkRecord, Group, Sample, SampleState
from ..core.router import Launch, Router
from ..wire import (SLO_PARAM, SLO_REJECTED, ChunkAnswer, ChunkRequest, chunk_rid, group_of_sample, routing_namespace,
                    slo_param)
from .instance_client import InstanceClient, InstanceRejected, InstanceUnavailable
from .instances import Instances

logger = logging.getLogger("seer_sglang.frontend")


class NoHealthyInstance(RuntimeError):
    pass


@dataclasses.dataclass
class EngineHooks:
    """Observers the frontend attaches (metrics); all optional and called synchronously."""

    on_sample_done: Callable[[Sample], None] | None = None
    on_chunk_done: Callable[[ChunkRecord], None] | None = None  # returned, answered or lost
    on_load: Callable[[int, InstanceView], None] | None = None
    on_slo_report: Callable[[int, dict[str, Any]], None] | None = None  # an instance's seer_slo counters
    # Finds a stop string that SGLang could not see because it spans a chunk boundary; returns
    # (tokens to keep, matched string) or None. Set by the frontend, which owns the tokenizer.
    find_stop: Callable[[Sample], tuple[int, str] | None] | None = None
    # Tokens of a sample's context the global KV pool holds under the given weight version's key
    # (blocking I/O: runs in a thread).
    pool_probe: Callable[[list[int], str], int] | None = None
    # A weight version no chunk reported before: the pool's pages of earlier versions are stale.
    on_weight_version: Callable[[str], None] | None = None
    # Instances that answer before their pages are written (--kv-pool-write-wait-ms 0, or attached
    # without the plugin's setting) get them into the pool a few ms after the chunk returns.
    pool_probe_delay_s: float = 0.02


class RolloutEngine:
    def __init__(self, clients: list[InstanceClient], policy: SchedulingPolicy, *,
                 poll_interval_s: float = 0.5, unavailable_timeout_s: float = 30.0,
                 hooks: EngineHooks | None = None, timeline_len: int = 200_000, max_chunk_failures: int = 8,
                 mixed_weight_versions: bool = ROLLOUT.mixed_weight_versions,
                 instance_down_s: float = ROLLOUT.instance_down_s, slo_headroom: float = SLO_CONFIG.headroom):
        self.router = Router(policy, [InstanceView(index=i) for i in range(len(clients))], slo_headroom)
        self.hooks = hooks or EngineHooks()
        self._wake = asyncio.Event()
        self.instances = Instances(clients, self.router, changed=self._wake.set, instance_down_s=instance_down_s,
                                   timeline_len=timeline_len, on_load=self.hooks.on_load,
                                   on_slo_report=self.hooks.on_slo_report)
        self.poll_interval_s = poll_interval_s
        self.unavailable_timeout_s = unavailable_timeout_s
        self.instance_down_s = instance_down_s
        self._given_up: set[str] = set()  # samples whose chunk on a stalled instance was given up
        self.max_chunk_failures = max_chunk_failures
        self.max_crashes_per_sample = 2  # instances a sample may see die under it in a row
        # False: a sample whose weights change under it restarts from its prompt (one version per sample).
        self.mixed_weight_versions = mixed_weight_versions
        # the latest versions chunks reported (bounded: a long job updates its weights thousands of times)
        self.weight_versions_seen: collections.deque[str] = collections.deque(maxlen=64)
        # LoRA adapter name -> loads and unloads of it through this frontend (the admin routes count them)
        self.adapter_versions: dict[str, int] = {}
        self.paused = False
        self.pause_returns = False  # the pause answers resendable samples (set_paused)
        self._group_done: dict[str, asyncio.Event] = {}
        self._chunk_tasks: dict[str, asyncio.Task] = {}  # sample rid → running chunk
        self._loops: list[asyncio.Task] = []
        self._no_instance_since: float | None = None

    # ---- the router's state, read by the routes ------------------------------------------------
    @property
    def policy(self) -> SchedulingPolicy:
        return self.router.policy

    @property
    def buffer(self) -> RequestBuffer:
        return self.router.buffer

    @property
    def views(self) -> list[InstanceView]:
        return self.router.views

    @property
    def removed(self) -> set[int]:
        """Instances taken out (POST /remove_worker): never dispatched to."""
        return self.router.removed

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        await self.instances.poll()
        self._loops = [asyncio.create_task(self._dispatch_loop(), name="seer-dispatch"),
                       asyncio.create_task(self._poll_loop(), name="seer-poll")]

    async def stop(self) -> None:
        for task in self._loops + list(self._chunk_tasks.values()):
            task.cancel()
        await asyncio.gather(*self._loops, *self._chunk_tasks.values(), return_exceptions=True)
        await self.instances.close()

    # ---- read API for the routes -------------------------------------------------------------
    def idle(self) -> bool:
        """No rollout in flight."""
        return not self.buffer.groups

    def running_group(self, group_id: str) -> bool:
        return group_id in self.buffer.groups

    # ---- submission ------------------------------------------------------------------------
    def submit(self, group: Group) -> None:
        if self.router.healthy_count() == 0:
            raise NoHealthyInstance("no healthy SGLang instance")
        self.router.submit(group)
        self._group_done[group.group_id] = asyncio.Event()
        if any(s.params.slo is not None for s in group.samples):
            self.instances.slo_seen = True
        self._wake.set()

    def add_samples(self, group: Group, samples: list[Sample]) -> bool:
        """Late siblings join ``group`` if it is still in the buffer; False if it has left (done)."""
        if self.buffer.groups.get(group.group_id) is not group:
            return False
        if self.router.healthy_count() == 0:
            raise NoHealthyInstance("no healthy SGLang instance")
        self.router.add_samples(group, samples)
        self._wake.set()
        return True

    async def wait_group(self, group: Group) -> Group:
        event = self._group_done.get(group.group_id)  # gone once the group is done
        try:
            if event is not None:
                await event.wait()
        except asyncio.CancelledError:
            self.abort_group(group.group_id)  # the client went away: free its work everywhere
            raise
        return group

    # ---- control ---------------------------------------------------------------------------
    def abort_group(self, group_id: str) -> bool:
        group = self.buffer.groups.get(group_id)
        if group is None:
            return False
        for sample in group.samples:
            self.abort_sample(sample)
        return True

    def _end_early(self, sample: Sample, state: SampleState) -> None:
        """End a sample that has not finished; its running chunk, if any, is cancelled (closing the HTTP
        request makes SGLang abort the chunk)."""
        task = self._chunk_tasks.get(sample.rid)
        if task is not None:
            task.cancel()
        self._complete(sample, state)

    def abort_sample(self, sample: Sample) -> None:
        if sample.done:
            return
        sample.finish_reason = "abort"
        self._end_early(sample, SampleState.ABORTED)

    def _unfinished(self) -> list[Sample]:
        return [s for g in list(self.buffer.groups.values()) for s in g.samples if not s.done]

    def fail_all(self, message: str, status: int) -> int:
        """Every unfinished sample fails with ``message`` (its chunk is cancelled); returns how many."""
        live = self._unfinished()
        for sample in live:
            sample.error, sample.error_status, sample.finish_reason = message, status, "error"
            self._end_early(sample, SampleState.FAILED)
        return len(live)

    def abort_all(self) -> int:
        live = self._unfinished()
        for sample in live:
            self.abort_sample(sample)
        return len(live)

    def find(self, rid: str) -> list[Sample]:
        """Samples named by a group id or a sample rid."""
        if rid in self.buffer.groups:
            return list(self.buffer.groups[rid].samples)
        group = self.buffer.groups.get(group_of_sample(rid))
        return [s for s in group.samples if s.rid == rid] if group else []

    def set_policy(self, policy: SchedulingPolicy) -> None:
        """Swap the scheduling policy; only between rollouts, since policies keep per-group state."""
        self.router.set_policy(policy)

    def set_paused(self, paused: bool, *, returns: bool = False) -> int:
        """Stop or resume dispatching. ``returns`` (SGLang's pause mode "abort"): a sample whose caller
        resends aborted work (``ends_on_pause``: a ``/generate`` caller, as AReaL and slime resume a
        partial rollout) is answered as an abort with its tokens so far: at once when it waits in the
        buffer, when its aborted chunk comes back when it runs. Any other sample waits, its chunk cut
        short by the instance's abort, and goes on after the pause. Returns how many waiting samples
        were answered at once."""
        self.paused = paused
        self.pause_returns = paused and returns
        waiting = [s for s in self.buffer.pending() if s.ends_on_pause] if self.pause_returns else []
        for sample in waiting:
            self._return_on_pause(sample)
        self._wake.set()
        return len(waiting)

    def _return_on_pause(self, sample: Sample) -> None:
        sample.finish_reason, sample.error = "abort", "aborted by /pause_generation; resend it with its tokens so far"
        self._complete(sample, SampleState.ABORTED)

    def _put_back(self, sample: Sample) -> None:
        """An unfinished sample whose chunk ended goes back to the buffer, or to its caller in a pause
        that returns it."""
        if self.pause_returns and sample.ends_on_pause:
            self._return_on_pause(sample)
        else:
            self.router.requeue(sample)

    def _give_up_on(self, index: int) -> None:
        """A request to an instance that stopped answering (SIGSTOP, a hung scheduler) never returns, and
        its sample would wait for ever: once the instance has failed its polls for ``instance_down_s``,
        its running chunks are given up and their samples re-dispatched from the tokens they have."""
        for sample in self.buffer.running():
            task = self._chunk_tasks.get(sample.rid)
            if sample.instance == index and task is not None and sample.rid not in self._given_up:
                self._given_up.add(sample.rid)
                task.cancel()

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            for index in await self.instances.poll():
                self._give_up_on(index)
            if self.buffer.has_pending():
                self._wake.set()

    # ---- dispatch --------------------------------------------------------------------------
    async def _dispatch_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.paused or self.instances.memory_released or not self.buffer.has_pending():
                continue
            self._fail_if_no_instance()
            decisions = self.router.schedule(time.time())
            for refusal in decisions.refused:  # no instance can serve it within its TPOT SLO
                self._refuse_slo(refusal.sample, refusal.reason)
            for launch in decisions.launches:
                self._start(launch)

    def _refuse_slo(self, sample: Sample, why: str) -> None:
        sample.error, sample.error_status, sample.finish_reason = why, 429, "error"
        self._complete(sample, SampleState.FAILED)

    def _fail_if_no_instance(self) -> None:
        if self.router.healthy_count() > 0:
            self._no_instance_since = None
            return
        now = time.monotonic()
        self._no_instance_since = self._no_instance_since or now
        if now - self._no_instance_since < self.unavailable_timeout_s:
            return
        for sample in self.buffer.pending():
            sample.error, sample.error_status, sample.finish_reason = "no healthy SGLang instance", 503, "error"
            self._complete(sample, SampleState.FAILED)

    def _start(self, launch: Launch) -> None:
        task = asyncio.create_task(self._run_chunk(launch))
        self._chunk_tasks[launch.sample.rid] = task
        task.add_done_callback(lambda t: self._cancelled_before_start(t, launch))

    def _cancelled_before_start(self, task: asyncio.Task, launch: Launch) -> None:
        """A chunk task cancelled before its first step (an abort or a stall give-up in the same loop
        turn as the dispatch) never runs ``_run_chunk``, whose handlers settle every other ending: settle
        it here, or its instance keeps the claim for ever and a given-up sample is never sent again."""
        if self._chunk_tasks.get(launch.sample.rid) is task:  # else the chunk settled itself
            self._settle_cancelled(launch)

    def _settle_cancelled(self, launch: Launch) -> bool:
        """Settle a cancelled chunk. One given up on a stalled instance (``_give_up_on``) goes back to
        the buffer and returns True; any other cancellation was an abort or a shutdown."""
        given_up = launch.sample.rid in self._given_up
        self._settle(launch)
        if given_up:
            self._redispatch(launch.sample, launch.instance, f"no answer for {self.instance_down_s:.0f} s")
        return given_up

    @staticmethod
    def _request(sample: Sample, max_new: int) -> ChunkRequest:
        params = sample.params.to_sglang(max_new, sample.sampling_seed, sample.generated)
        if sample.custom_params is not None:  # every chunk gets them, as SGLang would the whole request
            params["custom_params"] = {**sample.custom_params, **params.get("custom_params", {})}
        slo = sample.params.slo
        if slo is not None:  # read by the plugin's credit batching, admission and deadline order
            deadline = None if slo.ttft_s is None else sample.submitted_at + slo.ttft_s
            params["custom_params"] = {**params.get("custom_params", {}),
                                       SLO_PARAM: slo_param(slo.tpot_s, slo.ttft_s, deadline)}
        scope = dict(sample.cache_scope or {})
        routed_from = sample.routed_experts_from()
        # a prompt with media counts more positions than its ids before its first chunk says how many
        start = sample.routed_experts_start
        if start is not None and (sample.media or start < sample.prompt_tokens - 1):
            own = routing_namespace(sample.rid, sample.regenerations)
            scope["extra_key"] = f"{scope['extra_key']};{own}" if "extra_key" in scope else own
        return ChunkRequest(
            rid=chunk_rid(sample.rid, len(sample.chunks) - 1), input_ids=sample.context_ids, sampling_params=params,
            return_logprob=sample.params.logprobs,
            # output tokens only, except on the chunk that prefills the prompt of a sample that asked for it
            logprob_start_len=sample.input_logprob_start if sample.generated == 0 else -1,
            top_logprobs_num=sample.params.top_logprobs, priority=sample.priority,
            custom_logit_processor=sample.params.custom_logit_processor, **scope,
            token_ids_logprob=sample.params.token_ids_logprob, lora_path=sample.lora_path,
            routed_experts_start_len=routed_from, sampling_logprobs_mode=sample.params.sampling_mask,
            **(sample.media or {}))

    async def _run_chunk(self, launch: Launch) -> None:
        sample, instance, max_new, chunk = launch.sample, launch.instance, launch.max_new_tokens, launch.chunk
        client = self.instances.clients[instance]
        base = sample.generated
        adapter = self.adapter_versions.get(sample.lora_path, 0) if sample.lora_path is not None else None
        finish: dict[str, Any] | None = None
        answer: ChunkAnswer | None = None
        routed: str | None = None
        try:
            payload = self._request(sample, max_new).to_json()
            # an SLO sample streams from its instance, so that its first token's time is known
            if sample.on_tokens is not None or sample.params.slo is not None:
                async for event in client.generate_stream(payload):
                    answer = ChunkAnswer.parse(event)
                    self._absorb(sample, base, answer)
                    finish = answer.finish or finish
                    routed = answer.routed_experts or routed
                    self._chunk_meta(chunk, instance, answer)
            else:
                answer = ChunkAnswer.parse(await client.generate(payload))
                self._absorb(sample, base, answer)
                if base == 0 and sample.input_logprob_start >= 0:  # the prompt's, from the chunk that prefilled it
                    sample.input_logprobs = answer.input_logprobs()
                    sample.input_top_logprobs = answer.input_top_logprobs()
                    sample.input_token_ids_logprobs = answer.input_token_ids_logprobs()
                finish = answer.finish
                routed = answer.routed_experts
                self._chunk_meta(chunk, instance, answer)
        except InstanceUnavailable as e:
            self.router.instance_down(instance)
            self._settle(launch)
            if e.crashed:
                sample.crashed_on.append(instance)
            if len(set(sample.crashed_on)) >= self.max_crashes_per_sample:
                self._fail_poison(sample, str(e))
                return
            self._redispatch(sample, instance, str(e))
            return
        except InstanceRejected as e:
            self._settle(launch)
            if adapter is not None and self.adapter_versions.get(sample.lora_path, 0) != adapter:
                # its adapter was unloaded or loaded again while the chunk was on its way
                self._regenerate(sample, f"adapter {sample.lora_path!r} changed")
                return
            sample.error, sample.error_status, sample.finish_reason = str(e), e.status_code, "error"
            self._complete(sample, SampleState.FAILED)
            return
        except asyncio.CancelledError:
            if not self._settle_cancelled(launch):
                raise
            return
        except Exception as e:  # never lose a sample silently
            logger.exception("chunk of %s failed", sample.rid)
            self._settle(launch)
            sample.error, sample.error_status, sample.finish_reason = f"{type(e).__name__}: {e}", 500, "error"
            self._complete(sample, SampleState.FAILED)
            return
        self._settle(launch)
        sample.crashed_on.clear()
        if answer is not None and answer.passed:
            sample.add_meta(answer.passed, base)
        if base == 0 and sample.media and answer is not None and answer.prompt_tokens:
            sample.reported_prompt_tokens = answer.prompt_tokens
        if sample.routed_experts_start is not None and sample.generated > base:
            if routed is None:
                sample.error, sample.error_status, sample.finish_reason = (
                    f"instance {instance} returned no expert routings: start its SGLang with "
                    "--enable-return-routed-experts", 400, "error")
                self._complete(sample, SampleState.FAILED)
                return
            sample.add_routed_experts(base64.b64decode(routed))
        if answer is not None and not self._versions_agree(sample, base, chunk, answer):
            return
        if adapter is not None and not self._adapter_agrees(sample, adapter):
            return
        if (finish or {}).get("type") == "length" and sample.generated - base < max_new:
            # the instance ended it short of its budget: the end of the model's context (SGLang's bound,
            # a SEER instance's a verify width sooner), where SGLang ends the request too
            sample.finish_reason = "length"
        self._after_chunk(sample, finish)

    def _adapter_agrees(self, sample: Sample, version: int) -> bool:
        """A sample's tokens all come from one version of its LoRA adapter (the frontend counts each
        load and unload of it); one whose chunks ran under two is generated again from its prompt."""
        if sample.adapter_version is None or sample.adapter_version == version:
            sample.adapter_version = version
            return True
        self._regenerate(sample, f"adapter {sample.lora_path!r} changed")
        return False

    def _regenerate(self, sample: Sample, why: str) -> None:
        if sample.on_tokens is not None and sample.generated:  # streamed tokens cannot be taken back
            sample.error, sample.error_status, sample.finish_reason = (
                f"{why} while this sample streamed; send it again", 409, "error")
            self._complete(sample, SampleState.FAILED)
            return
        logger.info("%s under %s: generating it again from its prompt", why, sample.rid)
        sample.restart()
        self.router.requeue(sample)

    def _fail_poison(self, sample: Sample, why: str) -> None:
        """The instances the sample last ran on each died under it: it is not sent to another."""
        crashed = ", ".join(str(i) for i in sample.crashed_on)
        logger.error("%s: instances %s each failed while running it (%s); not sent to another", sample.rid,
                     crashed, why)
        sample.error, sample.error_status, sample.finish_reason = (
            f"instances {crashed} each failed while running this sample; it is not sent to another", 500, "error")
        self._complete(sample, SampleState.FAILED)

    def _versions_agree(self, sample: Sample, base: int, chunk: ChunkRecord, answer: ChunkAnswer) -> bool:
        """Record which weights made the chunk's tokens. A sample whose tokens now come from two
        versions starts over from its prompt (unless mixed versions are allowed); returns False then."""
        if answer.weight_version is None:
            return True  # an instance that does not report versions
        chunk.weight_version = answer.weight_version
        # SGLang gives spans only for a request that ran across an update; its last span is the version.
        spans = [(version, base + start, base + end) for version, start, end in answer.weight_spans] \
            or [(chunk.weight_version, base, sample.generated)]
        for seen, _, _ in spans:
            if seen not in self.weight_versions_seen:
                self.weight_versions_seen.append(seen)
                if len(self.weight_versions_seen) > 1:  # stays so: the deque never shrinks below its bound
                    logger.info("instance %d runs weight version %r", chunk.instance, seen)
                    if self.hooks.on_weight_version is not None:
                        self.hooks.on_weight_version(seen)
        if not sample.add_versions(spans) or self.mixed_weight_versions:
            return True
        self._regenerate(sample, f"the model's weights changed (versions "
                                 f"{' -> '.join(v for v, _, _ in sample.token_versions)})")
        return False

    def _chunk_meta(self, chunk: ChunkRecord, instance: int, answer: ChunkAnswer) -> None:
        chunk.reported = True
        self.instances.last_answer_at[instance] = time.monotonic()
        chunk.cached_tokens = answer.cached_tokens
        details = answer.cached_details
        if details is None:
            chunk.device_tokens, chunk.host_tokens, chunk.pool_tokens = chunk.cached_tokens, 0, 0
        else:
            chunk.device_tokens, chunk.host_tokens, chunk.pool_tokens = (details["device"], details["host"],
                                                                         details["storage"])
        chunk.draft_steps = answer.verify_steps
        chunk.accepted_tokens = answer.accepted_drafts
        chunk.proposed_drafts = answer.proposed_drafts
        self.router.retracted(instance, answer.retractions - chunk.retractions)  # stream events are cumulative
        chunk.retractions = answer.retractions

    def _redispatch(self, sample: Sample, instance: int, why: str) -> None:
        """The chunk was lost with its instance: the sample goes on elsewhere from the tokens it has."""
        sample.failures += 1
        if sample.failures > self.max_chunk_failures:
            sample.error, sample.error_status, sample.finish_reason = (
                f"gave up after {sample.failures} failed dispatches: {why}", 503, "error")
            self._complete(sample, SampleState.FAILED)
            return
        logger.warning("chunk of %s lost on instance %d (%s); re-dispatching from %d tokens",
                       sample.rid, instance, why, sample.generated)
        self.router.requeue(sample)

    def _settle(self, launch: Launch) -> None:
        self.router.chunk_ended(launch, time.time())
        self._chunk_tasks.pop(launch.sample.rid, None)
        self._given_up.discard(launch.sample.rid)
        if self.hooks.on_chunk_done:
            self.hooks.on_chunk_done(launch.chunk)
        self._wake.set()

    def _absorb(self, sample: Sample, base: int, answer: ChunkAnswer) -> None:
        """Take SGLang's cumulative output of this chunk; append only what is new."""
        have = sample.generated - base
        new_ids = answer.output_ids[have:]
        if not new_ids:
            return
        if sample.params.logprobs:
            sample.logprobs.extend(answer.output_logprobs(have, have + len(new_ids)))
            sample.top_logprobs.extend(answer.output_top_logprobs(have, have + len(new_ids)))
            if sample.params.token_ids_logprob:
                sample.token_ids_logprobs.extend(answer.output_token_ids_logprobs(have, have + len(new_ids)))
        if sample.params.sampling_mask is not None:
            sample.sampling_masks.extend(answer.sampling_masks(have, have + len(new_ids)))
            sample.sampling_logprobs.extend(answer.sampling_logprobs(have, have + len(new_ids)))
        sample.output_ids.extend(new_ids)
        sample.chunks[-1].new_tokens += len(new_ids)
        if sample.first_token_at is None:
            sample.first_token_at = time.time()
        # The tokens that end a sample reach a streaming client with its final event (and finish
        # reason), as in SGLang's stream; sent here as well, that event would repeat them.
        ends = answer.finish_type in ("stop", "abort") or sample.remaining <= 0
        if sample.on_tokens is not None and not ends:
            sample.on_tokens(sample, new_ids)

    def _after_chunk(self, sample: Sample, finish: dict[str, Any] | None) -> None:
        kind = (finish or {}).get("type")
        if kind != "abort" and len(sample.chunks) > 1 and sample.params.stop and self.hooks.find_stop:
            found = self.hooks.find_stop(sample)
            if found:  # a stop string across a chunk boundary, which no single chunk could see
                keep, matched = found
                sample.keep_tokens(keep)
                sample.finish_reason, sample.matched_stop = "stop", matched
                self._complete(sample, SampleState.FINISHED)
                return
        if kind == "stop":
            sample.finish_reason, sample.matched_stop = "stop", finish.get("matched")
        elif kind == "abort":
            if self.paused:  # a pause (mode "abort") cut the chunk short
                self._put_back(sample)
                return
            message = str(finish.get("message", "aborted by SGLang"))
            if message.startswith(SLO_REJECTED):  # the instance refused it: its SLO cannot be met
                self._refuse_slo(sample, message[len(SLO_REJECTED):].lstrip(": "))
                return
            sample.finish_reason, sample.error = "abort", message
            self._complete(sample, SampleState.ABORTED)
            return
        elif sample.remaining <= 0:
            sample.finish_reason = "length"
        if sample.finish_reason is not None:
            self._complete(sample, SampleState.FINISHED)
        else:
            self._put_back(sample)
            if self.hooks.pool_probe is not None and not sample.done:
                asyncio.create_task(self._probe_pool(sample))

    async def _probe_pool(self, sample: Sample) -> None:
        """Learn how much of the sample's context is in the pool, for the cost of moving it."""
        await asyncio.sleep(self.hooks.pool_probe_delay_s)
        context, version = sample.context_ids, sample.weight_version
        if version is None:
            return
        try:
            sample.pool_tokens = await asyncio.to_thread(self.hooks.pool_probe, context, version)
        except Exception as e:  # a pool that is down only makes moves look as costly as recompute
            logger.debug("pool probe failed: %s", e)
            sample.pool_tokens = 0
        self._wake.set()

    def _complete(self, sample: Sample, state: SampleState) -> None:
        if sample.done:
            return
        done_group = self.router.finish(sample, state, time.time())
        if self.hooks.on_sample_done:
            self.hooks.on_sample_done(sample)
        if sample.on_done is not None:
            sample.on_done(sample)
        if done_group is not None:
            event = self._group_done.pop(done_group.group_id, None)
            if event:
                event.set()
        self._wake.set()
