"""The embedded default model end to end: 2 CPU instances of SmolLM2-135M-Instruct (slow: ~2 min)."""

import openai
import pytest

from conftest import start_seer, stop_seer, wait_server

pytestmark = pytest.mark.slow


def test_default_model_chat_n4_writes_math(tmp_path):
    server = start_seer(None, tmp_path, "--num-instances", "2")  # the default model
    try:
        wait_server(server)
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        assert model.endswith("smollm2")
        out = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "What is 12 * 3? Answer step by step."}],
            n=4, max_tokens=40, temperature=0.7, seed=1)
        texts = [c.message.content for c in out.choices]
        assert len(texts) == 4 and all(t.strip() for t in texts)
        assert sum("36" in t for t in texts) >= 2, texts  # a 135M model still mostly gets this right
        assert all(c.finish_reason in ("stop", "length") for c in out.choices)
    finally:
        assert stop_seer(server) == []
