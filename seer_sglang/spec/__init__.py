"""Grouped speculative decoding: model-free drafters and the grouped draft server.

``make_drafter(name)`` gives a drafter (no I/O) with the ``Drafter`` interface:
``suffix`` (per request), ``group-suffix`` (per prompt group, the default) or ``sam``.
"""

from __future__ import annotations

from seer_sglang.spec.draft import Draft, Drafter, IndexedDrafter
from seer_sglang.spec.sam import SamDrafter
from seer_sglang.spec.suffix_tree import SuffixDrafter

DRAFTERS = ("suffix", "group-suffix", "sam")
DEFAULT_DRAFTER = "group-suffix"
# Set in the environment of an SGLang instance running SEER: the drafter name, and the draft server address.
DRAFTER_ENV = "SEER_SPEC_DRAFTER"
SERVER_ENV = "SEER_DRAFT_SERVER"
BUDGET_ENV = "SEER_DRAFT_BUDGET"  # adaptive | threshold | full
COST_ENV = "SEER_DRAFT_COST"  # profile file for the adaptive budget
BUDGETS = ("adaptive", "threshold", "full")


def make_drafter(name: str = DEFAULT_DRAFTER, native: bool | str | None = None, **kw) -> IndexedDrafter:
    """``native``: None uses the C automaton when it loads, True requires it, False forces Python,
    "ext" or "ctypes" picks a native binding."""
    if name == "suffix":
        return SuffixDrafter(per_request=True, native=native, **kw)
    if name == "group-suffix":
        return SuffixDrafter(per_request=False, native=native, **kw)
    if name == "sam":
        return SamDrafter(native=native, **kw)
    raise ValueError(f"unknown drafter {name!r}; choose one of {DRAFTERS}")


__all__ = ["BUDGETS", "BUDGET_ENV", "COST_ENV", "DRAFTERS", "DEFAULT_DRAFTER", "DRAFTER_ENV", "SERVER_ENV", "Draft", "Drafter", "IndexedDrafter", "SamDrafter", "SuffixDrafter",
           "make_drafter"]
