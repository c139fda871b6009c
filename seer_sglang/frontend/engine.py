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
import collections
import dataclasses
import logging
import time
from typing import Any, Callable

from ..config import ROLLOUT, SLO_CONFIG
from ..core.buffer import RequestBuffer
from ..core.policy import InstanceView, SchedulingPolicy
from ..core.request import ChunkRecord, Group, Sample, SampleState
from ..core.router import Launch, Load, Router
from ..core.slo import fitted_step_time, step_time
from ..core.step_model import StepModel
from ..wire import SLO_PARAM, SLO_REJECTED, chunk_rid, group_of_sample, slo_param
from .instance_client import InstanceClient, InstanceRejected, InstanceUnavailable

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


@dataclasses.dataclass
class LoadPoint:
    """One telemetry sample of one instance, for timelines (KV usage, running, retractions)."""

    t: float
    instance: int
    healthy: bool
    kv_used: int
    kv_capacity: int
    running: int
    waiting: int
    inflight: int
    retractions: int  # retractions reported by finished chunks on this instance so far


class RolloutEngine:
    def __init__(self, clients: list[InstanceClient], policy: SchedulingPolicy, *,
                 poll_interval_s: float = 0.5, unavailable_timeout_s: float = 30.0,
                 hooks: EngineHooks | None = None, timeline_len: int = 200_000, max_chunk_failures: int = 8,
                 mixed_weight_versions: bool = ROLLOUT.mixed_weight_versions,
                 instance_down_s: float = ROLLOUT.instance_down_s, slo_headroom: float = SLO_CONFIG.headroom):
        self.clients = clients
        self.router = Router(policy, [InstanceView(index=i) for i in range(len(clients))], slo_headroom)
        self.poll_interval_s = poll_interval_s
        self.unavailable_timeout_s = unavailable_timeout_s
        self.instance_down_s = instance_down_s
        self._down_since: dict[int, float] = {}  # instance -> when its polls began to fail
        self._given_up: set[str] = set()  # samples whose chunk on a stalled instance was given up
        self.hooks = hooks or EngineHooks()
        self.max_chunk_failures = max_chunk_failures
        self.max_crashes_per_sample = 2  # instances a sample may see die under it in a row
        self.last_answer_at: dict[int, float] = {}  # instance -> when a chunk last got an answer from it
        # False: a sample whose weights change under it restarts from its prompt (one version per sample).
        self.mixed_weight_versions = mixed_weight_versions
        # the latest versions chunks reported (bounded: a long job updates its weights thousands of times)
        self.weight_versions_seen: collections.deque[str] = collections.deque(maxlen=64)
        self.paused = False
        # SGLang memory tags each instance gave back (sleep mode); while any KV cache is, nothing is dispatched
        self.released_memory: dict[int, set[str]] = collections.defaultdict(set)
        self._wake = asyncio.Event()
        self._group_done: dict[str, asyncio.Event] = {}
        self._chunk_tasks: dict[str, asyncio.Task] = {}  # sample rid → running chunk
        self._loops: list[asyncio.Task] = []
        self._no_instance_since: float | None = None
        self.timeline: collections.deque[LoadPoint] = collections.deque(maxlen=timeline_len)
        self._slo_seen = False  # an SLO request came: the instances' step-time fits are read with their loads
        self._slo_fits_at = 0.0
        self.slo_reports: dict[int, dict[str, Any]] = {}  # instance -> its plugin's seer_slo report

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

    @property
    def retractions(self) -> list[int]:
        """SGLang's retractions of our chunks, per instance (as the chunks reported them)."""
        return [v.retractions for v in self.views]

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        await self.poll_loads()
        self._loops = [asyncio.create_task(self._dispatch_loop(), name="seer-dispatch"),
                       asyncio.create_task(self._poll_loop(), name="seer-poll")]

    async def stop(self) -> None:
        for task in self._loops + list(self._chunk_tasks.values()):
            task.cancel()
        await asyncio.gather(*self._loops, *self._chunk_tasks.values(), return_exceptions=True)
        for client in self.clients:
            await client.close()

    # ---- membership (the router's worker routes) ---------------------------------------------
    def active_clients(self) -> list[InstanceClient]:
        """The instances in the deployment: calls fanned out to "every instance" go to these."""
        return [c for c in self.clients if c.index not in self.removed]

    def find_client(self, url: str) -> InstanceClient | None:
        url = url.rstrip("/")
        return next((c for c in self.clients if c.url == url), None)

    async def add_instance(self, client: InstanceClient) -> None:
        """A running SGLang instance joins: it gets chunks from the next dispatch on. ``client.index``
        is the next index, or a removed instance's own (the same URL comes back)."""
        if client.index == len(self.clients):
            self.clients.append(client)
            self.router.add_instance()
        else:
            old = self.clients[client.index]
            self.clients[client.index] = client
            await old.close()
        self.router.readmit(client.index)
        await self.poll_loads()
        self._wake.set()

    def remove_instance(self, index: int) -> None:
        """An instance leaves: nothing more is dispatched to it; its chunks in flight finish there. Its
        view stays down, since load polls skip removed instances (``poll_loads``)."""
        self.router.remove_instance(index)
        self._wake.set()

    async def readmit(self, index: int) -> None:
        """An instance taken out (``remove_instance``) gets chunks again, its client as it was."""
        self.router.readmit(index)
        await self.poll_loads()
        self._wake.set()

    # ---- read API for the routes -------------------------------------------------------------
    def healthy_count(self) -> int:
        return self.router.healthy_count()

    def idle(self) -> bool:
        """No rollout in flight."""
        return not self.buffer.groups

    def running_group(self, group_id: str) -> bool:
        return group_id in self.buffer.groups

    def instance_status(self) -> list[dict[str, Any]]:
        return [{"index": v.index, "url": self.clients[v.index].url, "healthy": v.healthy, "running": v.running,
                 "waiting": v.waiting, "used_tokens": v.used_tokens, "capacity_tokens": v.capacity_tokens,
                 "inflight_chunks": v.inflight} for v in self.views if v.index not in self.removed]

    def timeline_since(self, t: float) -> list[LoadPoint]:
        return [p for p in self.timeline if p.t >= t]

    async def broadcast(self, path: str, body: dict[str, Any] | list[dict[str, Any]] | None, *,
                        method: str = "POST", params: dict[str, Any] | None = None,
                        control: bool = False) -> list[dict[str, Any]]:
        """One call on every instance (POST: an admin call, with one body for all or one per instance;
        GET: a read); each instance's status and answer. An instance marked down is not called: its
        entry says so (status 503, ``skipped``), and a hung one cannot hold up the others' answers.
        ``control``: a call with the short timeout (``InstanceClient.post_admin``)."""
        clients = self.active_clients()
        bodies = body if isinstance(body, list) else [body] * len(clients)

        async def call(client: InstanceClient, b: Any) -> dict[str, Any]:
            entry = {"instance": client.index, "url": client.url}
            if not self.views[client.index].healthy:
                return {**entry, "status": 503, "skipped": True,
                        "body": {"error": f"instance {client.index} is marked down; not called"}}
            status, content = await (client.post_admin(path, b, control=control) if method == "POST"
                                     else client.get(path, params))
            return {**entry, "status": status, "body": content}

        return list(await asyncio.gather(*(call(c, b) for c, b in zip(clients, bodies))))

    # ---- submission ------------------------------------------------------------------------
    def submit(self, group: Group) -> None:
        if self.healthy_count() == 0:
            raise NoHealthyInstance("no healthy SGLang instance")
        self.router.submit(group)
        self._group_done[group.group_id] = asyncio.Event()
        if any(s.params.slo is not None for s in group.samples):
            self._slo_seen = True
        self._wake.set()

    def add_samples(self, group: Group, samples: list[Sample]) -> bool:
        """Late siblings join ``group`` if it is still in the buffer; False if it has left (done)."""
        if self.buffer.groups.get(group.group_id) is not group:
            return False
        if self.healthy_count() == 0:
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

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self._wake.set()

    @property
    def memory_released(self) -> bool:
        return any("kv_cache" in self.released_memory[c.index] for c in self.active_clients())

    def mark_memory(self, index: int, tags: set[str], released: bool) -> None:
        """Record that instance ``index`` gave ``tags`` back (or took them again)."""
        if released:
            self.released_memory[index] |= tags
        else:
            self.released_memory[index] -= tags
        self._wake.set()

    # ---- telemetry -------------------------------------------------------------------------
    async def poll_loads(self) -> None:
        clients = self.active_clients()
        results = await asyncio.gather(*(c.load() for c in clients), return_exceptions=True)
        for client, result in zip(clients, results):
            if client.index in self.removed:
                continue  # removed while the poll was out: it stays out of dispatch
            view = self.views[client.index]
            load = None if isinstance(result, BaseException) else Load(
                result.max_total_tokens, result.used_tokens, result.running, result.waiting)
            if self.router.instance_seen(client.index, load):
                logger.warning("instance %d (%s) is %s", view.index, self.clients[view.index].url,
                               "back up" if view.healthy else "DOWN")
                self._wake.set()
            self._watch_stall(view)
            self.timeline.append(LoadPoint(time.time(), view.index, view.healthy, view.used_tokens,
                                           view.capacity_tokens, view.running, view.waiting, view.inflight,
                                           view.retractions))
            if self.hooks.on_load:
                self.hooks.on_load(view.index, view)
        if self._slo_seen and time.monotonic() - self._slo_fits_at >= SLO_CONFIG.report_interval_s:
            self._slo_fits_at = time.monotonic()
            await self.read_slo_fits(clients)

    def slo_counters(self) -> dict[str, int]:
        """The instances' best-effort decode slots in steps with SLO requests, summed (last reports)."""
        return {key: sum(int(r.get(key, 0)) for r in self.slo_reports.values())
                for key in ("best_effort_decoded", "best_effort_deferred")}

    async def read_slo_fits(self, clients: list[InstanceClient]) -> None:
        """Each instance's own decode step-time fit (the plugin's ``seer_slo`` report), for routing."""
        infos = await asyncio.gather(*(c.server_info() for c in clients), return_exceptions=True)
        for client, info in zip(clients, infos):
            if isinstance(info, BaseException):
                continue
            report = ((info.get("internal_states") or [{}])[0] or {}).get("seer_slo") or {}
            self.slo_reports[client.index] = report
            if self.hooks.on_slo_report:
                self.hooks.on_slo_report(client.index, report)
            fit, model = report.get("fit"), report.get("model")
            if model:  # an emulated instance decides by its profile
                self.views[client.index].step_s = step_time(StepModel.from_dict(model, strict=False))
            else:
                self.views[client.index].step_s = fitted_step_time(fit["base_s"], fit["per_seq_s"]) if fit else None

    def _watch_stall(self, view: InstanceView) -> None:
        """A request to an instance that stopped answering (SIGSTOP, a hung scheduler) never returns, and
        its sample would wait for ever: once the instance has failed its polls for ``instance_down_s``,
        its running chunks are given up and their samples re-dispatched from the tokens they have."""
        if view.healthy:
            self._down_since.pop(view.index, None)
            return
        since = self._down_since.setdefault(view.index, time.monotonic())
        if time.monotonic() - since < self.instance_down_s:
            return
        for sample in self.buffer.running():
            task = self._chunk_tasks.get(sample.rid)
            if sample.instance == view.index and task is not None and sample.rid not in self._given_up:
                self._given_up.add(sample.rid)
                task.cancel()

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            await self.poll_loads()
            if self.buffer.has_pending():
                self._wake.set()

    # ---- dispatch --------------------------------------------------------------------------
    async def _dispatch_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.paused or self.memory_released or not self.buffer.has_pending():
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
        if self.healthy_count() > 0:
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
        """Settle a cancelled chunk. One given up on a stalled instance (``_watch_stall``) goes back to
        the buffer and returns True; any other cancellation was an abort or a shutdown."""
        given_up = launch.sample.rid in self._given_up
        self._settle(launch)
        if given_up:
            self._redispatch(launch.sample, launch.instance, f"no answer for {self.instance_down_s:.0f} s")
        return given_up

    def _payload(self, sample: Sample, max_new: int) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "rid": chunk_rid(sample.rid, len(sample.chunks) - 1),  # read back by the plugin
            "input_ids": sample.context_ids,
            "sampling_params": sample.params.to_sglang(max_new, sample.sampling_seed, sample.generated),
            "return_logprob": sample.params.logprobs,
        }
        if sample.params.logprobs:
            # output tokens only, except on the chunk that prefills the prompt of a sample that asked for it
            payload["logprob_start_len"] = sample.input_logprob_start if sample.generated == 0 else -1
            if sample.params.top_logprobs:
                payload["top_logprobs_num"] = sample.params.top_logprobs
        if sample.priority:
            payload["priority"] = sample.priority
        if sample.params.custom_logit_processor:
            payload["custom_logit_processor"] = sample.params.custom_logit_processor
        if sample.custom_params is not None:  # every chunk gets them, as SGLang would the whole request
            params = payload["sampling_params"]
            params["custom_params"] = {**sample.custom_params, **params.get("custom_params", {})}
        slo = sample.params.slo
        if slo is not None:  # read by the plugin's credit batching, admission and deadline order
            deadline = None if slo.ttft_s is None else sample.submitted_at + slo.ttft_s
            params = payload["sampling_params"]
            params["custom_params"] = {**params.get("custom_params", {}),
                                       SLO_PARAM: slo_param(slo.tpot_s, slo.ttft_s, deadline)}
        return payload

    async def _run_chunk(self, launch: Launch) -> None:
        sample, instance, max_new, chunk = launch.sample, launch.instance, launch.max_new_tokens, launch.chunk
        client = self.clients[instance]
        base = sample.generated
        finish: dict[str, Any] | None = None
        last_meta: dict[str, Any] = {}
        try:
            payload = self._payload(sample, max_new)
            # an SLO sample streams from its instance, so that its first token's time is known
            if sample.on_tokens is not None or sample.params.slo is not None:
                async for event in client.generate_stream(payload):
                    self._absorb(sample, base, event)
                    last_meta = event["meta_info"]
                    finish = last_meta.get("finish_reason") or finish
                    self._chunk_meta(chunk, instance, last_meta)
            else:
                event = await client.generate(payload)
                self._absorb(sample, base, event)
                if base == 0 and sample.input_logprob_start >= 0:
                    self._absorb_input_logprobs(sample, event["meta_info"])
                last_meta = event["meta_info"]
                finish = last_meta.get("finish_reason")
                self._chunk_meta(chunk, instance, last_meta)
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
        if not self._versions_agree(sample, base, chunk, last_meta):
            return
        self._after_chunk(sample, finish)

    def _fail_poison(self, sample: Sample, why: str) -> None:
        """The instances the sample last ran on each died under it: it is not sent to another."""
        crashed = ", ".join(str(i) for i in sample.crashed_on)
        logger.error("%s: instances %s each failed while running it (%s); not sent to another", sample.rid,
                     crashed, why)
        sample.error, sample.error_status, sample.finish_reason = (
            f"instances {crashed} each failed while running this sample; it is not sent to another", 500, "error")
        self._complete(sample, SampleState.FAILED)

    def _versions_agree(self, sample: Sample, base: int, chunk: ChunkRecord, meta: dict[str, Any]) -> bool:
        """Record which weights made the chunk's tokens. A sample whose tokens now come from two
        versions starts over from its prompt (unless mixed versions are allowed); returns False then."""
        version = meta.get("weight_version")
        if version is None:
            return True  # an instance that does not report versions
        chunk.weight_version = str(version)
        # SGLang gives spans only for a request that ran across an update; its last span is the version.
        spans = [(str(s["version"]), base + int(s["start"]), base + int(s["end"]))
                 for s in meta.get("weight_versions") or []] or [(chunk.weight_version, base, sample.generated)]
        for seen, _, _ in spans:
            if seen not in self.weight_versions_seen:
                self.weight_versions_seen.append(seen)
                if len(self.weight_versions_seen) > 1:  # stays so: the deque never shrinks below its bound
                    logger.info("instance %d runs weight version %r", chunk.instance, seen)
                    if self.hooks.on_weight_version is not None:
                        self.hooks.on_weight_version(seen)
        if not sample.add_versions(spans) or self.mixed_weight_versions:
            return True
        if sample.on_tokens is not None:  # streamed tokens cannot be taken back
            sample.error, sample.error_status, sample.finish_reason = (
                f"the model's weights changed while this sample streamed (versions "
                f"{sorted({v for v, _, _ in sample.token_versions})}); send it again", 409, "error")
            self._complete(sample, SampleState.FAILED)
            return False
        logger.info("weights changed under %s (%s): generating it again from its prompt", sample.rid,
                    " -> ".join(v for v, _, _ in sample.token_versions))
        sample.restart()
        self.router.requeue(sample)
        return False

    def _chunk_meta(self, chunk: ChunkRecord, instance: int, meta: dict[str, Any]) -> None:
        chunk.reported = True
        self.last_answer_at[instance] = time.monotonic()
        chunk.cached_tokens = meta.get("cached_tokens", 0)
        details = meta.get("cached_tokens_details") or {}
        chunk.device_tokens = int(details.get("device") or 0)
        chunk.host_tokens = int(details.get("host") or 0)
        chunk.pool_tokens = int(details.get("storage") or 0)
        if not details:
            chunk.device_tokens = chunk.cached_tokens
        chunk.draft_steps = int(meta.get("spec_verify_ct") or 0)
        chunk.accepted_tokens = int(meta.get("spec_num_correct_drafts") or 0)
        retractions = int(meta.get("num_retractions") or 0)
        self.router.retracted(instance, retractions - chunk.retractions)  # stream events are cumulative
        chunk.retractions = retractions

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

    def _absorb(self, sample: Sample, base: int, event: dict[str, Any]) -> None:
        """Take SGLang's cumulative output of this chunk; append only what is new."""
        ids = event.get("output_ids") or []
        have = sample.generated - base
        new_ids = ids[have:]
        if not new_ids:
            return
        meta = event["meta_info"]
        if sample.params.logprobs:
            lps = meta.get("output_token_logprobs") or []
            sample.logprobs.extend(float(lp[0]) for lp in lps[have:have + len(new_ids)])
            tops = meta.get("output_top_logprobs") or []
            for entry in tops[have:have + len(new_ids)]:
                sample.top_logprobs.append([(int(t[1]), float(t[0])) for t in (entry or [])])
        sample.output_ids.extend(new_ids)
        sample.chunks[-1].new_tokens += len(new_ids)
        if sample.first_token_at is None:
            sample.first_token_at = time.time()
        # The tokens that end a sample reach a streaming client with its final event (and finish
        # reason), as in SGLang's stream; sent here as well, that event would repeat them.
        ends = (meta.get("finish_reason") or {}).get("type") in ("stop", "abort") or sample.remaining <= 0
        if sample.on_tokens is not None and not ends:
            sample.on_tokens(sample, new_ids)

    @staticmethod
    def _absorb_input_logprobs(sample: Sample, meta: dict[str, Any]) -> None:
        """The prompt's logprobs, from the chunk that prefilled it (SGLang's ``[logprob, id, text]``)."""
        sample.input_logprobs = [(None if e[0] is None else float(e[0]), int(e[1]))
                                 for e in meta.get("input_token_logprobs") or []]
        sample.input_top_logprobs = [None if step is None else [(float(e[0]), int(e[1])) for e in step]
                                     for step in meta.get("input_top_logprobs") or []]

    def _after_chunk(self, sample: Sample, finish: dict[str, Any] | None) -> None:
        kind = (finish or {}).get("type")
        if kind != "abort" and len(sample.chunks) > 1 and sample.params.stop and self.hooks.find_stop:
            found = self.hooks.find_stop(sample)
            if found:  # a stop string across a chunk boundary, which no single chunk could see
                keep, matched = found
                del sample.output_ids[keep:], sample.logprobs[keep:], sample.top_logprobs[keep:]
                sample.finish_reason, sample.matched_stop = "stop", matched
                self._complete(sample, SampleState.FINISHED)
                return
        if kind == "stop":
            sample.finish_reason, sample.matched_stop = "stop", finish.get("matched")
        elif kind == "abort":
            if self.paused:  # a pause (mode "abort") cut the chunk short: resume it later, lose nothing
                self.router.requeue(sample)
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
            self.router.requeue(sample)
            if self.hooks.pool_probe is not None:
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
