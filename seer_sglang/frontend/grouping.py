"""Prompt groups from per-sample traffic.

Trainers send one ``/generate`` request per sample: slime and AReaL start one task per sample of a GRPO
group, veRL repeats its batch n times. Seer's scheduling and group drafts need the G siblings as one
group, and none of them may wait for the others (a multi-turn agent's next turn, a teacher's scoring
call): a request is dispatched at once, as a group of its own samples, and a sibling with the same
prompt and settings that comes while that group runs joins it (``Frontend.form_group``). A trainer
that knows its groups can name them (a group key and size): such a group is formed as soon as its
last sample arrives, or a window after the latest one came.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Callable

from ..core.request import Group
from .native import NativeSample


@dataclass
class _Bucket:
    opened_at: float
    natives: list[NativeSample] = field(default_factory=list)
    size: int | None = None  # the caller's group size: formed as soon as it is reached
    formed: asyncio.Future | None = None
    timer: asyncio.TimerHandle | None = None


class SampleGrouper:
    """Collects samples by group key and hands each bucket to ``form``, which makes and submits its
    group (or adds the samples to the running group of their key). An unnamed bucket goes at once,
    after the samples of the call that opened it; a named one (``size`` given) as soon as it is
    complete, else ``window_s`` after its latest sample arrived (at most ``max_wait`` windows after
    the first)."""

    def __init__(self, window_s: float, form: Callable[[str, list[NativeSample]], Group], max_size: int = 1024,
                 max_wait: float = 5.0):
        self.window_s = window_s
        self.form = form
        self.max_size = max_size
        self.max_wait = max_wait
        self._open: dict[str, _Bucket] = {}

    def waiting(self) -> list[NativeSample]:
        return [n for b in self._open.values() for n in b.natives]

    async def join(self, keyed: list[tuple[str, NativeSample]], size: int | None = None) -> None:
        """Put each sample in its key's bucket; returns once each is in a submitted group (its
        ``sample`` set). Raises what forming the group raised (e.g. no healthy instance)."""
        loop = asyncio.get_running_loop()
        waits: dict[asyncio.Future, None] = {}  # each bucket's future once, in order
        now_forming: dict[str, None] = {}  # unnamed buckets: formed once this call's samples are in them
        now = loop.time()
        for key, native in keyed:
            bucket = self._open.get(key)
            if bucket is None:
                bucket = self._open[key] = _Bucket(opened_at=now, size=size, formed=loop.create_future())
            if bucket.timer is not None:
                bucket.timer.cancel()
                bucket.timer = None
            if self.window_s > 0 and bucket.size:
                due = min(bucket.opened_at + self.max_wait * self.window_s, now + self.window_s)
                bucket.timer = loop.call_at(due, self._flush, key)
            else:
                now_forming[key] = None
            bucket.natives.append(native)
            waits[bucket.formed] = None
            if len(bucket.natives) >= min(bucket.size or self.max_size, self.max_size):
                self._flush(key)
        # Samples of the same call always group: the unnamed buckets are formed after the loop, with
        # no trip through the event loop (a multi-turn agent's turn waits for it).
        for key in now_forming:
            self._flush(key)
        if all(w.done() for w in waits):
            for w in waits:
                w.result()  # raises what forming the group raised
            return
        # Shielded: a caller that goes away must not cancel a group other callers' samples are in.
        await asyncio.gather(*(asyncio.shield(w) for w in waits))

    def _flush(self, key: str) -> None:
        bucket = self._open.pop(key, None)
        if bucket is None:
            return
        if bucket.timer is not None:
            bucket.timer.cancel()
        try:
            group = self.form(key, bucket.natives)
        except Exception as e:
            bucket.formed.set_exception(e)
            return
        bucket.formed.set_result(group)
