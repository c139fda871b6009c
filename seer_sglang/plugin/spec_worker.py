"""The ``SEER`` speculative worker: SGLang's NGRAM verify path with a pluggable, group-aware drafter.

NGRAM already drafts model-free token trees and verifies them in one target forward; only its draft
source (one C++ n-gram corpus per instance, blind to prompt groups) is wrong for grouped rollouts,
where the useful drafts come from the sibling samples of the same prompt. This worker keeps NGRAM's
verify, KV bookkeeping and relay, and swaps the corpus for a drafter with the interface of
``seer_sglang.speculative.draft.Drafter``: ``register_group(group, prompt)``, ``update(group, request,
prev_token_count, new_tokens) -> stored count`` (response tokens only, idempotent by offset) and
``draft(group, request, max_tokens, max_paths) -> Draft``.

The group comes from the router's rid ``<group>-<index>-c<chunk>`` (``seer_sglang.wire``); all chunks
of one sample share the request id ``<group>-<index>``. Chunk 0 brings the group prompt. A later chunk's input is the
prompt plus the sample's earlier output, split by the prompt the drafter already holds for the group.

Each step a draft budget (``seer_sglang.speculative.budget``) picks the draft length gamma* for the batch
and, on CPU, splits gamma* * B draft tokens among the requests by their drafts' acceptance estimates
(long-tail requests weighted by lambda). The verify is then ragged: only the nodes given out go through
the model (``_CompactVerify``), and a step without drafts runs as SGLang's plain decode step. That is
the ``ragged`` verify layout (``--verify-layout``, the CPU's default). ``bucketed`` takes the same
budget decisions and pads every request to the smallest of a few fixed widths that holds the step's
widest one (the shapes a device captures one graph per width for); ``full`` (the GPU's default, where
captured graphs and FlashInfer plans are per width) verifies every draft at the full width.

Its settings come from the environment (``seer_sglang.config.PluginConfig``): the drafter (a name of
``speculative.drafters.make_drafter``, or ``module:callable`` called with the server args), the draft
server address to sync through, the budget and the adaptive budget's profile (without one it fits its
own step times as it runs).
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Sequence

import numpy as np
import torch
from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.runtime_context import get_device, get_schedule, get_spec
from sglang.srt.speculative.base_spec_worker import BaseSpecWorker
from sglang.srt.speculative.ngram_info import NgramVerifyInput
from sglang.srt.speculative.ngram_worker import NGRAMWorker

from ..config import DRAFT, PluginConfig
from ..core.step_model import emulated_model
from ..speculative.budget import BudgetRequest, high_priority, make_budget, verify_layout, verify_width
from ..speculative.draft import Draft, Drafter
from ..wire import CASCADE_BACKEND, DEPTH_PARAM, parse_chunk_rid
from .emulation import batch_kv_tokens

logger = logging.getLogger("seer_sglang.plugin")
GROUP_TTL_S = DRAFT.group_ttl_s  # a group with no request here for this long leaves the local drafter


def request_key(rid: str) -> tuple[str, str, int]:
    """(group_id, request_id, chunk) of an SGLang rid; a rid outside the router's format is its own group."""
    parsed = parse_chunk_rid(rid)
    return (rid, rid, 0) if parsed is None else parsed


def tree_layout(last_token: int, draft: Draft, num_nodes: int) -> tuple[np.ndarray, np.ndarray, int]:
    """SGLang's verify layout of one request: node 0 = the last verified token, then the draft.

    Returns (tokens [num_nodes] int64, mask [num_nodes, num_nodes] bool, nodes used), mask[i, j]
    meaning node j is node i or one of its ancestors; the used nodes come first. A draft node whose
    parent does not come before it, or past the budget, is dropped with its subtree. Unused nodes see
    only themselves: SGLang then takes them for parentless nodes and never visits them, so they
    cannot be accepted.
    """
    tokens = np.full(num_nodes, last_token, dtype=np.int64)
    mask = np.eye(num_nodes, dtype=np.bool_)
    node_of: dict[int, int] = {-1: 0}
    for i, (token, parent) in enumerate(zip(draft.tokens, draft.parents)):
        if len(node_of) >= num_nodes:
            break
        if parent not in node_of or parent >= i:
            continue
        node, up = len(node_of), node_of[parent]
        node_of[i] = node
        tokens[node] = token
        mask[node] |= mask[up]
    return tokens, mask, len(node_of)


class _WidthViews:
    """Per-batch-size views of one of NGRAM's preallocated buffers at the worker's current verify
    width w, standing in for the lists NGRAM builds for its fixed width: ``rows`` gives [bs, w],
    ``flat`` [bs * w], ``square`` [bs * w * w] (the tree masks)."""

    def __init__(self, worker: "SeerSpecWorker", buffer, shape: str):
        self.worker, self.buffer, self.shape = worker, buffer.view(-1), shape

    def __getitem__(self, bs: int):
        w = self.worker.draft_token_num
        if self.shape == "rows":
            return self.buffer[:bs * w].view(bs, w)
        return self.buffer[:bs * w * (w if self.shape == "square" else 1)]


def needs_own_sampler(info, reqs: Sequence = ()) -> bool:
    """Whether the batch must decode one token per step through SGLang's sampler: penalties count
    every earlier token (SGLang's verify counts only each step's last one), the verify step does not
    apply a logit bias, and a request that wants its expert routings (``return_routed_experts``) needs
    each position's routing from the forward that computed its token: a verify step records routings
    at the tree nodes' KV slots, not at the slots its accepted tokens end up in; and one that wants each
    token's sampling support (``return_sampling_mask``), which only SGLang's sampler gives."""
    if any(getattr(req, "return_routed_experts", False) or getattr(req, "return_sampling_mask", False)
           for req in reqs):
        return True
    orchestrator = info.penalizer_orchestrator
    return bool((orchestrator is not None and orchestrator.is_required) or info.acc_additive_penalties is not None
                or info.acc_scaling_penalties is not None or info.logit_bias is not None)


def response_tail(prompt: Sequence[int], offset: int, output: Sequence[int], pending: list[int],
                  start: int) -> list[int]:
    """``response[start:]`` where a request's response is ``prompt[offset:] + output + pending`` (a
    continuation chunk's prompt ends with the sample's earlier chunks), copying only that tail."""
    from_prompt = max(0, len(prompt) - offset)
    if start < from_prompt:
        return list(prompt[offset + start:]) + list(output) + pending
    start -= from_prompt
    if start < len(output):
        return list(output[start:]) + pending
    return pending[start - len(output):]


def make_drafter(config: PluginConfig, server_args) -> Drafter:
    if ":" in config.drafter:
        module, _, name = config.drafter.partition(":")
        return getattr(importlib.import_module(module), name)(server_args)
    if config.draft_server:
        from ..draft_server.client import DraftClient

        return DraftClient(config.draft_server, config.drafter, timeout_s=config.draft_server_timeout_s)
    from ..speculative.drafters import make_drafter as make_named

    return make_named(config.drafter)


class _RequestsLeft:
    """Stands in for NGRAM's corpus in the calls the inherited code makes on it."""

    def __init__(self, worker: SeerSpecWorker):
        self.worker = worker

    def erase_match_state(self, rids: list[str]) -> None:
        for rid in rids:
            self.worker.live.pop(rid, None)

    def reset(self) -> None:
        self.worker.live.clear()


class _CompactVerify:
    """The target worker as NGRAM's verify step sees it: the verify input carries the requests'
    rollout groups (``spec_info.group_ids``, read by the ``seer_cascade`` backend to share each
    group's prompt) and, when requests verify different numbers of nodes, only the used ones.

    NGRAM lays the batch out as a rectangle [B, width] (its sampler, acceptance walk and KV moves
    need that stride); the padding nodes can never be accepted. Only the used nodes go through the
    model: input ids, KV slots and positions are cut to them for the forward (the attention backend
    reads ``spec_info.compact_nodes`` to place them in the tree), and the logits come back scattered
    into the rectangle. The step then costs the tokens the budget gave out, not B * width.
    """

    def __init__(self, target, nodes: np.ndarray | None, group_ids: list[int] | None = None):
        self.target = target
        self.nodes = nodes
        self.group_ids = group_ids

    def __getattr__(self, name):
        return getattr(self.target, name)

    def forward_batch_generation(self, batch: ScheduleBatch, pp_proxy_tensors=None, is_verify: bool = False):
        if not is_verify:
            return self.target.forward_batch_generation(batch, pp_proxy_tensors=pp_proxy_tensors)
        spec = batch.spec_info
        if self.group_ids is not None:
            spec.group_ids = torch.tensor(self.group_ids, dtype=torch.int64, device=batch.input_ids.device)
        if self.nodes is None:
            return self.target.forward_batch_generation(batch, pp_proxy_tensors=pp_proxy_tensors, is_verify=True)
        used = torch.from_numpy(np.flatnonzero(self.nodes)).to(batch.input_ids.device)
        saved = batch.input_ids, batch.out_cache_loc, spec.positions
        batch.input_ids, batch.out_cache_loc, spec.positions = saved[0][used], saved[1][used], saved[2][used]
        spec.compact_nodes, spec.tree_cache_loc = used, saved[1]
        try:
            out = self.target.forward_batch_generation(batch, pp_proxy_tensors=pp_proxy_tensors, is_verify=True)
        finally:
            batch.input_ids, batch.out_cache_loc, spec.positions = saved
            spec.compact_nodes = spec.tree_cache_loc = None
        logits = out.logits_output.next_token_logits
        full = logits.new_zeros((self.nodes.size, logits.shape[-1]))
        full[used] = logits
        out.logits_output.next_token_logits = full
        spec.sampled_nodes = used  # the seeded sampler draws these rows only (verify_sampling)
        return out


class SeerSpecWorker(NGRAMWorker):
    """NGRAM's tree verification with drafts from a group-aware drafter."""

    # The ragged plan of the step in progress; class-level so the target_worker property can be read
    # before __init__ has run to the end.
    _nodes: np.ndarray | None = None  # [B, width] used verify nodes when they are ragged
    _group_ids: list[int] | None = None  # each request's group in the batch (GPU verify)

    def __init__(self, server_args, gpu_id: int, nccl_port: int, target_worker):
        # NGRAMWorker.__init__ would build (and JIT-compile) its C++ corpus; the rest is its setup.
        BaseSpecWorker.__init__(self)
        spec = get_spec()
        self.server_args = server_args
        self.enable_overlap = not get_schedule().disable_overlap_schedule
        self._target_worker = target_worker
        self.model_runner = target_worker.model_runner
        self.page_size = get_schedule().page_size
        self.draft_token_num = spec.speculative_num_draft_tokens
        self.speculative_num_draft_tokens = spec.speculative_num_draft_tokens
        self.max_trie_depth = spec.speculative_ngram_max_trie_depth
        self.topk = spec.speculative_eagle_topk
        self.speculative_num_steps = spec.speculative_num_steps
        self.device = get_device().device
        self.adaptive_controller = None
        self._prev_decode_rids: set = set()
        self.grammar_tree_host = None
        self.max_paths = max(1, spec.speculative_eagle_topk or 1)
        config = PluginConfig.from_env()
        self.drafter = make_drafter(config, server_args)
        self.synced = bool(config.draft_server)
        self.offset: dict[str, int] = {}  # rid -> where its response starts in its token sequence
        self.fed: dict[str, int] = {}  # rid -> response tokens the drafter holds
        self.live: dict = {}  # rid -> Req, for the requests of recent decode batches
        self.group_used: dict[str, float] = {}  # group -> last time a request of it was here
        self.rid_seen: dict[str, float] = {}  # rid -> last step it was in
        self._next_idle_check = 0.0
        self.ngram_corpus = _RequestsLeft(self)
        self.full_width = self.draft_token_num
        on_cpu = str(self.device).startswith("cpu")
        # ragged: only the nodes given out go through the model (_CompactVerify); bucketed: the same
        # budget, each request padded to the step's bucket (with LoRA); full: every draft, the full width
        self.layout = verify_layout(config.verify_layout, on_cpu, bool(server_args.enable_lora or server_args.lora_paths))
        self.budgeted = self.layout != "full"
        # Only the seer_cascade backend reads the verify input's group tags: no per-step work otherwise.
        self.tag_groups = not on_cpu and server_args.attention_backend == CASCADE_BACKEND
        # An emulated instance's steps last what its profile says: the budget prices drafts by the profile.
        self.budget = make_budget(config.budget, self.full_width - 1, config.cost_path,
                                  emulated_model(config.emulate, config.emulate_length_scale, config.emulate_time_scale))
        self._planned: tuple[np.ndarray, np.ndarray] | None = None
        self._verified: list[int] = []
        self._gamma = 0  # the draft length the budget chose for this step
        self._budget_log = {"steps": 0, "off": 0, "drafts": 0.0, "next_s": 0.0}
        if on_cpu:
            from .cpu_ops import install_lazy

            install_lazy()
        from . import verify_sampling

        verify_sampling.install()
        logger.info("SEER speculative worker: drafter %s, %d draft tokens, %d paths, %s budget, %s verify",
                    type(self.drafter).__name__, self.draft_token_num - 1, self.max_paths,
                    config.budget if self.budgeted else "no", self.layout)

    def _init_preallocated_tensors(self):
        super()._init_preallocated_tensors()
        self.positions_batch = _WidthViews(self, self.positions, "flat")
        self.draft_tokens_batch = _WidthViews(self, self.draft_tokens, "flat")
        self.tree_mask_batch = _WidthViews(self, self.tree_mask, "square")
        self.retrieve_indexes_batch = _WidthViews(self, self.retrieve_indexes, "rows")
        self.retrieve_next_token_batch = _WidthViews(self, self.retrieve_next_token, "rows")
        self.retrieve_next_sibling_batch = _WidthViews(self, self.retrieve_next_sibling, "rows")

    def clear_cache_pool(self):
        self.offset.clear()
        self.fed.clear()
        self.live.clear()
        self.rid_seen.clear()
        self._prev_decode_rids = set()

    def _release_idle_groups(self, now: float) -> None:
        """Bound the local drafter's memory over a long rollout; a group's siblings may still come
        back within the TTL (and a draft server keeps its own copy)."""
        if now < self._next_idle_check:
            return
        self._next_idle_check = now + 10.0
        # A request aborted while retracted never reaches note_request_finished: its per-rid state
        # goes once it has sat out a whole TTL (a retracted one that resumes later re-registers).
        stale = [rid for rid, seen in self.rid_seen.items() if now - seen > GROUP_TTL_S]
        for rid in stale:
            for table in (self.rid_seen, self.offset, self.fed, self.live):
                table.pop(rid, None)
        active = {request_key(rid)[0] for rid in self.fed}
        for group, last in list(self.group_used.items()):
            if group not in active and now - last > GROUP_TTL_S:
                self.drafter.release_group(group)
                del self.group_used[group]

    def _response_offset(self, req) -> int | None:
        """Register the request's group; returns where its response starts, None if not known yet."""
        group, _, chunk = request_key(req.rid)
        prompt = list(req.origin_input_ids_unpadded)
        if chunk == 0:
            self.drafter.register_group(group, prompt)
            return len(prompt)
        known = self.drafter.prompt(group)
        self.drafter.register_group(group, ())
        if known and prompt[:len(known)] == known:
            return len(known)
        if self.synced:  # the replica may still be fetching the group from the draft server
            return None
        return len(prompt)  # a local drafter that never saw the group: this chunk's tokens only

    def _catch_up(self, req, pending: list[int]) -> int:
        """Give the drafter the response tokens of ``req`` it lacks; returns the sequence's last token.

        The sequence is prompt + committed output (cut at its stop: the last verify step may overshoot
        it) + ``pending`` (tokens verified but, under overlap scheduling, not yet committed). Runs for
        every request at every step, so only the new tail is copied, never the whole output.
        """
        prompt, output = req.origin_input_ids_unpadded, req.output_ids_through_stop
        last = pending[-1] if pending else output[-1] if len(output) else prompt[-1]
        offset = self.offset.get(req.rid)
        if offset is None:
            offset = self._response_offset(req)
            if offset is None:
                return last
            self.offset[req.rid] = offset
        fed = self.fed.get(req.rid, 0)
        if max(0, len(prompt) - offset) + len(output) + len(pending) > fed:
            group, request, _ = request_key(req.rid)
            stored = self.drafter.update(group, request, fed, response_tail(prompt, offset, output, pending, fed))
            if stored < fed:  # the drafter has a gap (e.g. a restarted server): resend from there
                stored = self.drafter.update(group, request, stored,
                                             response_tail(prompt, offset, output, pending, stored))
            self.fed[req.rid] = stored
        return last

    def note_request_finished(self, *, rid: str, natural_stop: bool) -> None:
        """Called after a request's final tokens are committed: the drafter gets the whole output."""
        req = self.live.pop(rid, None)
        if req is not None:
            self._catch_up(req, [])
        self.offset.pop(rid, None)
        self.fed.pop(rid, None)
        self.rid_seen.pop(rid, None)

    def _prepare_draft_tokens(self, batch: ScheduleBatch) -> tuple[np.ndarray, np.ndarray]:
        """The drafts planned at the start of the step (their budget set the width NGRAM's setup uses)."""
        planned, self._planned = self._planned, None
        return planned

    def _plan_drafts(self, batch: ScheduleBatch) -> tuple[np.ndarray, np.ndarray]:
        """Feed the drafter, draft every request, give out the budget, and set the verify width."""
        bs, full = len(batch.reqs), self.full_width
        pending: list[list[int]] = [[] for _ in range(bs)]
        if self.enable_overlap and not batch.grammar_needs_sync():
            flat = batch.spec_info.accept_tokens.cpu().tolist()  # rows padded to the full width
            lens = batch.spec_info.accept_lens.cpu().tolist()
            pending = [flat[i * full:i * full + lens[i]] for i in range(bs)]
        # Feed the whole batch before drafting, so siblings see each other's latest tokens.
        now, last = time.monotonic(), []
        for req, extra in zip(batch.reqs, pending):
            self.live[req.rid] = req
            self.rid_seen[req.rid] = now
            self.group_used[request_key(req.rid)[0]] = now
            last.append(self._catch_up(req, extra))
        self._release_idle_groups(now)
        # The budget splits gamma* * B draft tokens among the requests, long-tail ones first; the
        # ragged verify runs only those (see _CompactVerify), the bucketed one pads every request to the
        # step's bucket. At the full width drafts cost nothing more, so all are verified.
        own = needs_own_sampler(batch.sampling_info, batch.reqs)
        gamma = self._gamma = 0 if own else self.budget.gamma_star(bs, batch_kv_tokens(batch)) \
            if self.budgeted else full - 1
        drafts = [self.drafter.draft(*request_key(req.rid)[:2], full - 1, self.max_paths) if gamma else Draft()
                  for req in batch.reqs]
        orders = [draft.best_first() for draft in drafts]
        if self.budgeted:
            high = high_priority([req.priority for req in batch.reqs])
            asks = [BudgetRequest(req.rid, h, list(np.take(draft.node_scores(), order)))
                    for req, h, draft, order in zip(batch.reqs, high, drafts, orders)]
            given = self.budget.allocate(asks, bs, gamma).per_request
            self._verified = [min(given[req.rid], len(draft)) for req, draft in zip(batch.reqs, drafts)]
        else:
            self._verified = [len(draft) for draft in drafts]
        width = 1 if own else verify_width(self.layout, 1 + max(self._verified, default=0), full)
        self.draft_token_num = width
        tokens = np.empty((bs, width), dtype=np.int64)
        masks = np.empty((bs, width, width), dtype=np.bool_)
        nodes = np.zeros((bs, width), dtype=np.bool_)
        for i, (draft, order, k) in enumerate(zip(drafts, orders, self._verified)):
            kept = draft if k == len(draft) else draft.keep(order[:k])
            tokens[i], masks[i], used = tree_layout(last[i], kept, width)
            nodes[i, :used] = True
            self._verified[i] = used - 1
        self._nodes = nodes if self.layout == "ragged" and not nodes.all() else None
        if self.tag_groups:  # the seer_cascade backend shares each group's prompt
            index: dict[str, int] = {}
            self._group_ids = [index.setdefault(request_key(req.rid)[0], len(index)) for req in batch.reqs]
        self._note_budget(sum(self._verified) / max(1, bs), bs)
        return tokens.reshape(-1), masks.reshape(-1)

    def _note_budget(self, drafts_per_request: float, batch_size: int) -> None:
        """A log line every 30 s: how often the budget turned drafts off, and the drafts verified."""
        log = self._budget_log
        log["steps"] += 1
        log["off"] += drafts_per_request == 0
        log["drafts"] += drafts_per_request
        log["batch"] = batch_size
        now = time.monotonic()
        if now >= log["next_s"]:
            if log["next_s"]:
                logger.info("draft budget: %d decode steps, %d without drafts, %.2f drafts verified per request",
                            log["steps"], log["off"], log["drafts"] / log["steps"])
                model = self.budget.current_model()
                if model is not None:
                    logger.info("draft cost model: step %.1f ms + %.2f ms/seq + %.2f ms/token, verify +%.1f ms "
                                "+ %.2f ms/seq; acceptance %s; gamma* at batch 1/4/16/64: %s",
                                1e3 * model.base_s, 1e3 * model.per_seq_s, 1e3 * model.per_token_s,
                                1e3 * model.verify_base_s, 1e3 * model.verify_per_seq_s,
                                " ".join(f"{a:.2f}" for a in model.accept_curve),
                                "/".join(str(model.best_gamma(b, self.full_width - 1)) for b in (1, 4, 16, 64)))
                rates = self.budget.rates
                if rates is not None:
                    logger.info("measured tokens per request-second by draft length at batch %d: %s",
                                log["batch"], rates.summary(log["batch"]))
            log.update(steps=0, off=0, drafts=0.0, next_s=now + 30.0)

    def forward_batch_generation(self, batch: ScheduleBatch, on_publish=None, pp_proxy_tensors=None):
        """NGRAM's step at the planned width; rows come back padded to the full width, the stride the
        scheduler and the overlap relay were sized for. A step without drafts is SGLang's plain decode
        step (on CPU the verify machinery costs more than it; penalties and logit bias need it), and every
        step feeds the online cost fit."""
        decode = batch.forward_mode.is_decode()
        bs = len(batch.reqs)
        start = time.perf_counter()
        try:
            if decode:
                self._planned = self._plan_drafts(batch)
            # Width 1: on CPU when drafts do not pay, anywhere when the batch needs SGLang's own sampler.
            if decode and self.draft_token_num == 1 and not batch.has_grammar:
                result = self._plain_decode(batch, on_publish, pp_proxy_tensors)
            else:
                result = super().forward_batch_generation(batch, on_publish, pp_proxy_tensors)
        finally:
            width, self.draft_token_num = self.draft_token_num, self.full_width
            self._planned = self._nodes = self._group_ids = None
        if not decode:
            return result
        if width < self.full_width:
            rows = result.next_token_ids.view(bs, width)
            padded = torch.zeros((bs, self.full_width), dtype=rows.dtype, device=rows.device)
            padded[:, :width] = rows
            result.next_token_ids = padded.view(-1)
            result.next_draft_input.accept_tokens = result.next_token_ids
            result.next_draft_input.draft_token_num = self.full_width
        if self.budgeted:
            accepted = (result.accept_lens - 1).tolist() if width > 1 else [0] * bs
            self.budget.record_step(bs, self._gamma if width > 1 else 0, self._verified, accepted, time.perf_counter() - start)
        return result

    @property
    def target_worker(self):
        """NGRAM's verify step calls the target through this; a ragged plan runs it compacted."""
        if self._nodes is None and self._group_ids is None:
            return self._target_worker
        return _CompactVerify(self._target_worker, self._nodes, self._group_ids)

    def _plain_decode(self, batch: ScheduleBatch, on_publish, pp_proxy_tensors) -> GenerationBatchResult:
        """One token per request through SGLang's own decode forward and sampler (seeded sampling,
        logit processors and logprobs exactly as without speculation), returned in the verify step's
        form: one accepted token per request, no drafts."""
        planned, self._planned = self._planned, None
        bs = len(batch.reqs)
        batch.input_ids = torch.from_numpy(planned[0]).to(self.device)  # width 1: each request's last token
        batch.out_cache_loc = assign_extend_cache_locs_func(
            req_pool_indices=batch.req_pool_indices, req_to_token=batch.req_to_token_pool.req_to_token,
            start_offset=batch.seq_lens, end_offset=batch.seq_lens + 1, batch_size=bs, draft_token_num=1,
            device=self.device)
        # A spec batch's seq_lens exclude the token being decoded; SGLang's decode forward counts it.
        saved = batch.seq_lens, batch.seq_lens_cpu, batch.orig_seq_lens, batch.seq_lens_sum, batch.spec_info
        batch.seq_lens, batch.seq_lens_cpu = saved[0] + 1, saved[1] + 1
        batch.orig_seq_lens, batch.seq_lens_sum, batch.spec_info = saved[2] + 1, None, None
        # Logit processors see these rows as the root of a verify tree (depth 0): the request's KV
        # allocation runs ahead of its tokens under speculation, so only the committed count is right.
        info = batch.sampling_info
        params = info.custom_params
        if info.has_custom_logit_processor and params:
            info.custom_params = [{**p, DEPTH_PARAM: 0} if p else p for p in params]
        try:
            out = self.target_worker.forward_batch_generation(batch, pp_proxy_tensors=pp_proxy_tensors)
        finally:
            batch.seq_lens, batch.seq_lens_cpu, batch.orig_seq_lens, batch.seq_lens_sum, batch.spec_info = saved
            info.custom_params = params
        logits_output = out.logits_output
        if batch.return_logprob and logits_output.next_token_logprobs is not None:
            logits_output.next_token_logprobs = logits_output.next_token_logprobs.view(bs, 1)
        new_seq_lens = batch.seq_lens + 1
        if on_publish is not None:
            on_publish(new_seq_lens)
        current = {req.rid for req in batch.reqs}  # as NGRAM's verify step: forget requests that left
        if self._prev_decode_rids - current:
            self.ngram_corpus.erase_match_state(list(self._prev_decode_rids - current))
        self._prev_decode_rids = current
        accept_lens = torch.ones(bs, dtype=torch.int32, device=self.device)
        next_token_ids = out.next_token_ids.view(bs)
        return GenerationBatchResult(
            logits_output=logits_output, next_token_ids=next_token_ids, can_run_cuda_graph=out.can_run_cuda_graph,
            accept_lens=accept_lens, new_seq_lens=new_seq_lens, routed_experts_output=out.routed_experts_output,
            indexer_topk_output=out.indexer_topk_output,
            next_draft_input=NgramVerifyInput(draft_token_num=1, new_seq_lens=new_seq_lens,
                                              accept_tokens=next_token_ids, accept_lens=accept_lens),
            speculative_num_draft_tokens=self.speculative_num_draft_tokens)

    def _update_ngram_corpus(self, batch: ScheduleBatch):
        """The drafter is fed from committed tokens (see _prepare_draft_tokens, note_request_finished)."""
