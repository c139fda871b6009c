"""The contracts between processes: the rid format both sides read, and the sample schema the
frontend writes and the trainer's client parses."""

from seer_sglang.wire import ChunkJSON, SampleJSON, chunk_rid, group_of_sample, parse_chunk_rid, sample_rid


def test_rids_round_trip_with_dashes_in_the_group():
    sample = sample_rid("g-7-x", 3)
    assert sample == "g-7-x-3" and group_of_sample(sample) == "g-7-x"
    parsed = parse_chunk_rid(chunk_rid(sample, 12))
    assert parsed == ("g-7-x", "g-7-x-3", 12)
    assert parsed.group == "g-7-x" and parsed.sample == sample and parsed.chunk == 12


def test_rids_the_frontend_did_not_write_are_not_parsed():
    for rid in (None, "", "plain-request", "g-1", "g-x-c2", "g-1-cx"):
        assert parse_chunk_rid(rid) is None


def test_sample_schema_round_trips():
    sample = SampleJSON(prompt_index=1, group_id="g", index=2, output_ids=[5, 6], text="hi", logprobs=[-0.5, -1.0],
                        finish_reason="length", prompt_tokens=3, completion_tokens=2, latency_s=1.5,
                        first_token_s=0.25, chunks=[ChunkJSON(0, 10.0, 11.0, 2, cached_tokens=1,
                                                              kv={"device": 1, "host": 0, "pool": 0,
                                                                  "recomputed": 2},
                                                              spec={"draft_steps": 1, "accepted_tokens": 0})],
                        rid="g-2", spec={"draft_steps": 1, "accepted_tokens": 0, "mean_acceptance_length": 1.0},
                        top_logprobs=[[[5, -0.5]], [[6, -1.0]]], submitted_at=9.5, weight_version="v2",
                        weight_versions=[["v1", 0, 1], ["v2", 1, 2]], regenerations=1)
    body = sample.to_json()
    assert body["timing"] == {"submitted_at": 9.5, "first_token_s": 0.25, "latency_s": 1.5}
    assert body["chunks"][0]["tokens"] == 2 and body["chunks"][0]["kv"]["recomputed"] == 2
    assert SampleJSON.from_json(body) == sample


def test_openai_requests_refuse_sampling_fields_they_would_drop():
    from seer_sglang.frontend.protocol import ChatCompletionRequest, CompletionRequest

    msgs = [{"role": "user", "content": "x"}]
    assert ChatCompletionRequest(messages=msgs, frequency_penalty=0.5).refused_field()[0] == "frequency_penalty"
    assert CompletionRequest(prompt="x", min_p=0.2).refused_field()[0] == "min_p"
    assert CompletionRequest(prompt="x", logit_bias={"3": 1.0}).refused_field()[0] == "logit_bias"
    # neutral values and extras that do not touch sampling pass
    assert ChatCompletionRequest(messages=msgs, frequency_penalty=0.0, repetition_penalty=1.0, min_p=0,
                                 logit_bias=None, user="u", metadata={"a": 1}).refused_field() is None
    assert CompletionRequest(prompt="x", skip_special_tokens=False).skip_special_tokens is False


def test_the_plugin_rekeys_a_request_to_one_weight_version():
    from seer_sglang.plugin.weight_namespace import rekey

    assert rekey(None, "v1") == "weight_version=v1"
    assert rekey("lora-7", "v1") == "lora-7|weight_version=v1"
    assert rekey("lora-7|weight_version=v1", "v2") == "lora-7|weight_version=v2"
    assert rekey(rekey("weight_version=v1", "v2"), "v2") == "weight_version=v2"


def test_the_instance_client_drops_idle_connections_before_sglang_closes_them():
    from sglang.srt.environ import envs

    from seer_sglang.frontend.instance_client import KEEPALIVE_EXPIRY_S

    assert KEEPALIVE_EXPIRY_S < envs.SGLANG_TIMEOUT_KEEP_ALIVE.get() / 2
