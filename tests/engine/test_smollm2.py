"""The embedded default model end to end: 2 CPU instances of SmolLM2-135M-Instruct with the default
speculative decoding (group-suffix drafts), against one SGLang instance without speculation (slow: ~3 min)."""

import httpx
import openai
import pytest

from conftest import start_seer, stop_seer, wait_seer
from seer_sglang.launch.instances import InstanceSpec, free_port, start_instance, stop_instances, wait_healthy
from seer_sglang.models import prepare
from seer_sglang.frontend.tokenizer import PromptTokenizer

pytestmark = pytest.mark.slow

QUESTIONS = ["What is 12 * 3? Answer step by step.", "A box holds 7 pens. How many pens are in 6 boxes?",
             "Solve for x: 2x + 6 = 20.", "What is the sum of the integers from 1 to 10?"]


@pytest.mark.timeout(1500)  # three SmolLM2 processes start on two cores: minutes on a busy machine
def test_default_model_chat_and_greedy_identity_with_speculation(tmp_path):
    # float32: exact token equality across different batch and verify shapes (bf16 can flip near-ties)
    plain = start_instance(InstanceSpec(model_path=str(prepare("smollm2")), port=free_port(), with_plugin=False,
                                        sglang_args=["--dtype", "float32"], log_path=tmp_path / "plain.log",
                                        cpu_threads=1))
    # the default model and draft; no KV pool: HiCache's host tier does not fit next to 3 float32 instances
    server = start_seer(None, tmp_path, "--num-instances", "2", "--dtype", "float32", "--kv-pool", "none")
    try:
        wait_seer(server)
        wait_healthy([plain], timeout_s=600, progress=False)
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        assert model.endswith("smollm2")
        out = client.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTIONS[0]}],
                                             n=4, max_tokens=40, temperature=0.7, seed=1)
        texts = [c.message.content for c in out.choices]
        assert len(texts) == 4 and all(t.strip() for t in texts)
        assert sum("36" in t for t in texts) >= 2, texts  # a 135M model still mostly gets this right
        assert all(c.finish_reason in ("stop", "length") for c in out.choices)

        # 32 greedy samples (4 prompts x 8 siblings drafting from each other) equal SGLang without speculation
        tok = PromptTokenizer(str(prepare("smollm2")))
        prompts = [tok.encode_chat([{"role": "user", "content": q}]) for q in QUESTIONS]
        body = {"prompts": [{"input_ids": p} for p in prompts], "n": 8, "max_tokens": 48, "temperature": 0}
        rollout = httpx.post(f"{server.url}/v1/rollout", json=body, timeout=900).json()
        samples = sorted(rollout["samples"], key=lambda s: (s["prompt_index"], s["index"]))
        assert len(samples) == 32
        ref = httpx.post(f"{plain.url}/generate", timeout=900, json={  # greedy: one answer per prompt
            "input_ids": prompts, "sampling_params": {"max_new_tokens": 48, "temperature": 0}}).json()
        assert [s["output_ids"] for s in samples] == [ref[s["prompt_index"]]["output_ids"] for s in samples]
        assert rollout["summary"]["spec"]["draft_steps"] > 0
    finally:
        assert stop_seer(server) == []
        stop_instances([plain])
