"""The grouper of per-sample requests: when a bucket of siblings becomes a group."""

from __future__ import annotations

import asyncio

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


def test_siblings_arriving_less_than_a_window_apart_are_one_group():
    # 60 ms apart with a 100 ms window: one group of 4 although the last comes 180 ms after the first
    assert _run(0.1, [(0.06 * i, f"s{i}", [1, 2]) for i in range(4)]) == [["s0", "s1", "s2", "s3"]]


def test_a_gap_longer_than_the_window_starts_a_new_group():
    assert _run(0.05, [(0.0, "a", [1]), (0.01, "b", [1]), (0.2, "c", [1])]) == [["a", "b"], ["c"]]


def test_a_burst_is_cut_after_max_wait_windows():
    groups = _run(0.05, [(0.04 * i, f"s{i}", [1]) for i in range(12)])  # 0.44 s of arrivals, cap 0.25 s
    assert len(groups) == 2 and sum(map(len, groups)) == 12


def test_other_prompts_and_settings_never_mix():
    formed = _run(0.05, [(0.0, "a", [1]), (0.0, "b", [2]), (0.01, "c", [1])])
    assert sorted(formed) == [["a", "c"], ["b"]]


def test_a_named_group_forms_as_soon_as_it_is_complete():
    formed = _run(10.0, [(0.0, "a", [1]), (0.01, "b", [1]), (0.02, "c", [1])], size=3, explicit="q7")
    assert formed == [["a", "b", "c"]]  # a 10 s window, yet the test returns at once
