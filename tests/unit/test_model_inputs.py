"""What a sample carries beyond text into every chunk: its expert routings joined across chunks, and its
media found in OpenAI-style messages."""

from __future__ import annotations

import numpy as np
import pytest

from seer_sglang.core.request import Sample, SamplingParams
from seer_sglang.frontend.errors import APIError
from seer_sglang.frontend.state import Frontend

LAYERS, TOP_K = 2, 3


def _rows(start: int, end: int) -> bytes:
    """Stand-in routings whose values name their position: row p is all p."""
    return np.repeat(np.arange(start, end, dtype=np.int32), LAYERS * TOP_K).tobytes()


def _chunk(sample: Sample, tokens: int) -> None:
    """One chunk as the engine takes it: its start, then its tokens, then the instance's rows."""
    start = sample.routed_experts_from()
    sample.output_ids.extend(range(100, 100 + tokens))
    sample.add_routed_experts(_rows(start, sample.positions - 1))


@pytest.mark.parametrize("start", [0, 3, 5])
def test_routings_join_over_chunks_as_one_request_answers_them(start):
    sample = Sample(rid="g-0", group_id="g", index=0, prompt_ids=list(range(6)),
                    params=SamplingParams(max_new_tokens=40), routed_experts_start=start)
    for tokens in (16, 16, 8):
        _chunk(sample, tokens)
    rows = np.frombuffer(sample.routed_experts_bytes(), dtype=np.int32).reshape(-1, LAYERS, TOP_K)
    assert rows[:, 0, 0].tolist() == list(range(start, 6 + 40 - 1))  # every position once, in order
    del sample.output_ids[30:]  # a stop string found across chunks trims the output
    rows = np.frombuffer(sample.routed_experts_bytes(), dtype=np.int32).reshape(-1, LAYERS, TOP_K)
    assert rows[:, 0, 0].tolist() == list(range(start, 6 + 30 - 1))
    sample.restart()
    assert sample.routed_experts_bytes() == b"" and sample.routed_experts_from() == start


def test_routings_of_a_prompt_with_media_count_the_positions_the_instance_expanded():
    """An image's placeholder is one id in the prompt and many positions on the instance: after the first
    chunk reports the expanded prompt, continuations start, and the rows join, at the instance's count."""
    sample = Sample(rid="g-0", group_id="g", index=0, prompt_ids=list(range(6)),
                    params=SamplingParams(max_new_tokens=40), routed_experts_start=0, media={"image_data": ["x"]})
    assert sample.routed_experts_from() == 0
    sample.output_ids.extend(range(100, 116))
    sample.reported_prompt_tokens = 20  # the first chunk's meta_info.prompt_tokens: 6 ids, 15 of them the image's
    sample.add_routed_experts(_rows(0, 20 + 16 - 1))
    assert sample.routed_experts_from() == 20 + 16 - 1  # the last sampled token, at its expanded position
    for tokens in (16, 8):
        _chunk(sample, tokens)
    rows = np.frombuffer(sample.routed_experts_bytes(), dtype=np.int32).reshape(-1, LAYERS, TOP_K)
    assert rows[:, 0, 0].tolist() == list(range(0, 20 + 40 - 1))


def test_a_sample_without_routings_asks_for_none():
    sample = Sample(rid="g-0", group_id="g", index=0, prompt_ids=[1, 2], params=SamplingParams(max_new_tokens=4))
    assert sample.routed_experts_from() is None and sample.routed_experts_bytes() == b""


def test_media_come_from_image_and_video_parts_then_the_fields_beside_them():
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:a"}},
                                             {"type": "text", "text": "and"},
                                             {"type": "image_url", "image_url": "data:b"},
                                             {"type": "video_url", "video_url": {"url": "v.mp4"}}]}]
    assert Frontend.media_of(messages, ["data:c"]) == {"image_data": ["data:a", "data:b", "data:c"],
                                                       "video_data": ["v.mp4"]}
    assert Frontend.media_of([{"role": "user", "content": "text only"}]) is None
    with pytest.raises(APIError):
        Frontend.media_of([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
