"""Registers the seer speculative pieces with SGLang: the ``seer_verify`` (CPU) and ``seer_cascade``
(GPU) attention backends, the ``SEER`` speculative algorithm and, on the CPU engine, torch versions
of the tree-verify kernels.

Called from the plugin's ``register()`` in every SGLang process, so it only touches registries and
cheap modules; the worker, the backend and the heavy SGLang modules load in the scheduler, and only
when speculation or the backend is selected.
"""

from __future__ import annotations

import logging

from ..wire import CASCADE_BACKEND, SPEC_ALGORITHM, VERIFY_BACKEND

logger = logging.getLogger("seer_sglang.plugin")
_registered = False


def register_spec() -> None:
    """Idempotent: plugin loading may run more than once per process. A failure here is logged and
    leaves the rest of the plugin working (plain serving needs none of this)."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        _register_attention_backend()
        _register_algorithm()
        _allow_sampling_supports()
        _allow_lora()
        from sglang.srt.utils import is_cpu

        if is_cpu():
            _register_cpu_kernels()
    except Exception:
        logger.exception("seer speculative decoding not registered")


def _register_attention_backend() -> None:
    from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES
    from sglang.srt.layers.attention.attention_registry import register_attention_backend

    for name in (VERIFY_BACKEND, CASCADE_BACKEND):
        if name not in ATTENTION_BACKEND_CHOICES:  # argparse validates --attention-backend against it
            ATTENTION_BACKEND_CHOICES.append(name)

    @register_attention_backend(VERIFY_BACKEND)
    def _create(runner):
        from .verify_backend import create_backend

        return create_backend(runner)

    @register_attention_backend(CASCADE_BACKEND)
    def _create_cascade(runner):
        from .cascade_backend import create_backend

        return create_backend(runner)


def _register_algorithm() -> None:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import get_spec

    if get_spec(SPEC_ALGORITHM) is not None:
        return

    @SpeculativeAlgorithm.register(SPEC_ALGORITHM, supports_overlap=True, spec_class=_seer_spec_class())
    def _factory(server_args):
        from .spec_worker import SeerSpecWorker

        return SeerSpecWorker


def _allow_sampling_supports() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.speculative.spec_sampling_mask.validate_spec_sampling_mask_request",
                          sampling_support_check, HookType.AROUND)


def _allow_lora() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.arg_groups.lora_hook.check_lora_speculative_compatibility",
                          lora_speculation_check, HookType.AROUND)


def lora_speculation_check(original, server_args, *args, **kwargs):
    """AROUND hook on SGLang's check of LoRA beside speculative decoding, which admits NGRAM (and the
    draft-model algorithms) by name: SGLang's LoRA layers lay a verify batch out with one width for
    every request. SEER verifies NGRAM's trees, and with LoRA on it pads every request of a step to one
    width (the ``bucketed`` verify layout, ``spec_worker``), so it is admitted as NGRAM is."""
    from sglang.srt.arg_groups.overrides import resolving_view

    if resolving_view(server_args).speculative_algorithm == SPEC_ALGORITHM:
        return None
    return original(server_args, *args, **kwargs)


def sampling_support_check(original, req, spec_algorithm, *args, **kwargs):
    """AROUND hook on SGLang's admission check of ``return_sampling_mask`` under speculation, which
    refuses every algorithm whose verify does not capture supports. SEER decodes a batch holding such a
    request one token per step through SGLang's own sampler (``spec_worker.needs_own_sampler``), which
    gives each token's support as it does without speculation; other algorithms keep SGLang's rule."""
    if getattr(spec_algorithm, "name", None) == SPEC_ALGORITHM:
        return None
    return original(req, spec_algorithm, *args, **kwargs)


def _seer_spec_class():
    """SGLang branches on ``is_ngram()`` for model-free tree drafts (KV sizing, verify input, relay of
    accepted tokens); SEER drafts the same kind of trees, so it answers like NGRAM there."""
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    class SeerSpecAlgo(CustomSpecAlgo):
        def is_ngram(self) -> bool:
            return True

        def has_draft_kv(self) -> bool:
            return False

        def handle_server_args(self, server_args) -> None:
            apply_tree_defaults(server_args)

        # The scheduler calls these on any algorithm; CustomSpecAlgo (0.5.23) does not define them.
        def carries_draft_hidden_states(self) -> bool:
            return False

        def need_topk(self) -> bool:
            return False

        def create_future_map(self, *args, **kwargs):
            from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

            return SpeculativeAlgorithm.create_future_map(self, *args, **kwargs)

    return SeerSpecAlgo


def apply_tree_defaults(server_args) -> None:
    """NGRAM's server-arg defaults (SGLang's ``_handle_ngram``), written as plain assignments:
    SGLang hands plugin algorithms a recorder that captures writes."""
    if server_args.device == "cpu":
        server_args.disable_overlap_schedule = True  # SGLang has no overlap speculative path on CPU
    if server_args.max_running_requests is None:
        server_args.max_running_requests = 48
    server_args.enable_mixed_chunk = False
    server_args.speculative_eagle_topk = server_args.speculative_ngram_max_bfs_breadth
    if server_args.speculative_num_draft_tokens is None:
        server_args.speculative_num_draft_tokens = 12
    if server_args.speculative_num_steps is None:
        server_args.speculative_num_steps = (server_args.speculative_num_draft_tokens
                                             // server_args.speculative_eagle_topk)


def _register_cpu_kernels() -> None:
    """REPLACE hooks on kernel names that SGLang's CPU engine imports from ``sgl_kernel``."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from .cpu_ops import KERNEL_OPS

    for (module, name), fn in KERNEL_OPS.items():
        HookRegistry.register(f"{module}.{name}", fn, HookType.REPLACE)
