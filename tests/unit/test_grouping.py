"""The grouper of per-sample requests: when a bucket of siblings becomes a group."""

from __future__ import annotations

import asyncio
import time

from seer_sglang.core.request import SamplingParams
from seer_sglang.frontend.grouping import SampleGrouper
from seer_sglang.frontend.native import NativeSample, group_key


def _native(rid: str, prompt: list[int], seed: int | None = None) -> NativeSample:
    return NativeSample(position=0, rid=rid, prompt_ids=prompt, params=SamplingParams(max_new_tokens=8, seed=seed),
                        sampling_seed=None, logprob_start=-1)


def _run(window_s: float, arrivals: list[tuple[float, str, list[int]]], size: int | None = None,
         explicit: str | None = None) -> list[list[str]]:
    """Samples arriving at the given times; the groups formed, as lists of rids."""
    formed: list[list[str]] = []

    async def main():
        grouper = SampleGrouper(window_s, lambda _key, natives: formed.append([n.rid for n in natives]))
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def arrive(at, rid, prompt):
            await asyncio.sleep(max(0.0, start + at - loop.time()))
            native = _native(rid, prompt)
            await grouper.join([(group_key(native, explicit), native)], size)

        await asyncio.gather(*(arrive(*a) for a in arrivals))

    asyncio.run(main())
    return formed


def test_an_unnamed_request_goes_at_once_whatever_the_window():
    # 60 ms apart with a 10 s window: each request is handed over as it comes (its running group,
    # if any, takes it: Frontend.form_group), and the test returns at once
    t0 = time.monotonic()
    formed = _run(10.0, [(0.06 * i, f"s{i}", [1, 2]) for i in range(4)])
    took = time.monotonic() - t0
    assert formed == [["s0"], ["s1"], ["s2"], ["s3"]] and took < 2.0


def test_the_samples_of_one_call_form_one_group():
    formed: list[list[str]] = []

    async def main():
        grouper = SampleGrouper(10.0, lambda _key, natives: formed.append([n.rid for n in natives]))
        natives = [_native(f"s{i}", [1, 2]) for i in range(3)]
        await grouper.join([(group_key(n, None), n) for n in natives])

    asyncio.run(main())
    assert formed == [["s0", "s1", "s2"]]


def test_other_prompts_and_settings_never_mix():
    formed: list[list[str]] = []

    async def main():
        grouper = SampleGrouper(10.0, lambda _key, natives: formed.append([n.rid for n in natives]))
        natives = [_native("a", [1]), _native("b", [2]), _native("c", [1]), _native("d", [1], seed=3)]
        await grouper.join([(group_key(n, None), n) for n in natives])

    asyncio.run(main())
    assert sorted(formed) == [["a", "c", "d"], ["b"]]  # a seed is not a setting: siblings draw their own


def test_a_named_group_forms_as_soon_as_it_is_complete():
    formed = _run(10.0, [(0.0, "a", [1]), (0.01, "b", [1]), (0.02, "c", [1])], size=3, explicit="q7")
    assert formed == [["a", "b", "c"]]  # a 10 s window, yet the test returns at once


def test_an_incomplete_named_group_waits_one_window_after_its_latest_sample():
    formed = _run(0.05, [(0.0, "a", [1]), (0.01, "b", [1]), (0.2, "c", [1])], size=4, explicit="q7")
    assert formed == [["a", "b"], ["c"]]


def test_a_named_burst_is_cut_after_max_wait_windows():
    groups = _run(0.05, [(0.04 * i, f"s{i}", [1]) for i in range(12)], size=100, explicit="q")
    assert len(groups) == 2 and sum(map(len, groups)) == 12
