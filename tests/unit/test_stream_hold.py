"""A streamed SLO request's start is held until its first token, so a request refused outright gets
its HTTP status (429) instead of a 200 stream of errors."""

from __future__ import annotations

import asyncio

from seer_sglang.frontend.routes.common import hold_until_first_token


def _held(events, samples):
    async def run():
        queue = asyncio.Queue()
        for e in events:
            queue.put_nowait(e)
        held = await hold_until_first_token(queue, samples)
        return held, [queue.get_nowait() for _ in range(queue.qsize())]

    return asyncio.run(run())


def test_held_up_to_the_first_token_and_the_rest_stays_queued():
    held, left = _held([("done", "a"), ("tokens", "b"), ("tokens", "b"), ("done", "b")], samples=3)
    assert held == [("done", "a"), ("tokens", "b")]
    assert left == [("tokens", "b"), ("done", "b")]


def test_every_sample_ending_before_a_token_ends_the_hold():
    held, left = _held([("done", "a"), ("done", "b"), ("tokens", "late")], samples=2)
    assert held == [("done", "a"), ("done", "b")] and left == [("tokens", "late")]


def test_the_hold_waits_for_an_event():
    async def run():
        queue = asyncio.Queue()
        task = asyncio.ensure_future(hold_until_first_token(queue, 1))
        await asyncio.sleep(0.01)
        assert not task.done()
        queue.put_nowait(("tokens", "a"))
        return await task

    assert asyncio.run(run()) == [("tokens", "a")]
