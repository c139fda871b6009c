"""Transfer scheduling: pool reads and writes yield to decode, but never wait without bound.

A pure policy (no I/O, no clock of its own): the instance cuts each pool transfer into pieces (one
L3 batch of pages) and asks, before each piece, whether it may run now. While a decode step is
running a piece waits; its wait, counted in decode steps and weighted by its kind, lifts it above
decode once it reaches ``starvation_steps``. Reads weigh more than writes: a continuation is
blocked on a read, while a write only makes the pool ready for a later move.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import KV_POOL


@dataclass(frozen=True)
class TransferDecision:
    run: bool
    reason: str  # "idle" | "starved" | "yield"


@dataclass
class TransferScheduler:
    starvation_steps: int = KV_POOL.transfer_starvation_steps
    read_weight: int = 2
    write_weight: int = 1

    def weight(self, kind: str) -> int:
        return self.read_weight if kind == "read" else self.write_weight

    def decide(self, kind: str, waited_steps: int, decode_running: bool) -> TransferDecision:
        if not decode_running:
            return TransferDecision(True, "idle")
        if waited_steps * self.weight(kind) >= self.starvation_steps:
            return TransferDecision(True, "starved")
        return TransferDecision(False, "yield")

    def max_wait_steps(self, kind: str) -> int:
        """The bound: no piece waits more decode steps than this."""
        w = self.weight(kind)
        return -(-self.starvation_steps // w)
