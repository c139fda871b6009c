"""The contracts between processes: the rid format both sides read, and the sample schema the
frontend writes and the trainer's client parses."""

from seer_sglang.wire import ChunkAnswer, ChunkJSON, SampleJSON, chunk_rid, group_of_sample, parse_chunk_rid, sample_rid


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


def test_an_adapters_pages_are_keyed_by_its_digest_not_the_instances_id_of_it():
    from seer_sglang.plugin.weight_namespace import keyed_by_adapter, rekey

    digests = {"3f0c": "d1"}
    # SGLang's Req appends its id of the adapter to the client's key (or to nothing)
    assert rekey(keyed_by_adapter("3f0c", "3f0c", digests), "v1") == "lora=d1|weight_version=v1"
    assert rekey(keyed_by_adapter("salt3f0c", "3f0c", digests), "v1") == "salt|lora=d1|weight_version=v1"
    # two instances' ids of one adapter are one key; an id with no digest, or no adapter, is left alone
    assert keyed_by_adapter("77aa", "77aa", {"77aa": "d1"}) == keyed_by_adapter("3f0c", "3f0c", digests)
    assert keyed_by_adapter("9e9e", "9e9e", digests) == "9e9e"
    assert keyed_by_adapter("salt", None, digests) == "salt" and keyed_by_adapter(None, None, digests) is None


def test_the_plugin_rekeys_a_request_to_one_weight_version():
    from seer_sglang.plugin.weight_namespace import rekey

    assert rekey(None, "v1") == "weight_version=v1"
    assert rekey("lora-7", "v1") == "lora-7|weight_version=v1"
    assert rekey("lora-7|weight_version=v1", "v2") == "lora-7|weight_version=v2"
    assert rekey(rekey("weight_version=v1", "v2"), "v2") == "weight_version=v2"


def test_penalties_and_min_tokens_span_the_whole_sample():
    """Each chunk tells the plugin how much of its input is earlier output (penalties count it) and
    carries what is left of min_tokens, capped at the chunk (SGLang refuses min above max)."""
    from seer_sglang.core.request import SamplingParams
    from seer_sglang.wire import PRIOR_OUTPUT_PARAM

    params = SamplingParams(max_new_tokens=40, frequency_penalty=0.5, repetition_penalty=1.3, min_tokens=30)
    first, second, third = params.to_sglang(16, 7, 0), params.to_sglang(16, 7, 16), params.to_sglang(8, 7, 32)
    assert "custom_params" not in first and first["min_new_tokens"] == 16
    assert second["custom_params"] == {PRIOR_OUTPUT_PARAM: 16} and second["min_new_tokens"] == 14
    assert third["custom_params"] == {PRIOR_OUTPUT_PARAM: 32} and "min_new_tokens" not in third
    assert all(p["frequency_penalty"] == 0.5 and p["repetition_penalty"] == 1.3 for p in (first, second, third))
    plain = SamplingParams(max_new_tokens=40).to_sglang(16, 7, 16)
    assert not {"custom_params", "frequency_penalty", "min_new_tokens", "logit_bias"} & set(plain)


def test_sampling_fields_check_bounds_before_any_work():
    import pytest
    from pydantic import ValidationError

    from seer_sglang.frontend.errors import APIError
    from seer_sglang.frontend.protocol import RolloutRequest

    with pytest.raises(ValidationError):
        RolloutRequest(prompts=["a"], logit_bias={"x": 1.0})
    with pytest.raises(ValidationError):
        RolloutRequest(prompts=["a"], presence_penalty=-3)
    with pytest.raises(APIError, match="min_tokens"):
        RolloutRequest(prompts=["a"], min_tokens=9).sampling_params(8, 100)
    with pytest.raises(APIError, match="outside the vocabulary"):
        RolloutRequest(prompts=["a"], logit_bias={"100": 1.0}).sampling_params(8, 100)
    params = RolloutRequest(prompts=["a"], logit_bias={" 7": -5.0}, min_tokens=2).sampling_params(8, 100)
    assert params.logit_bias == {"7": -5.0} and params.min_tokens == 2 and params.repetition_penalty == 1.0


def test_a_chunk_answer_reads_sglangs_fields_and_defaults_what_it_leaves_out():
    from seer_sglang.wire import ChunkAnswer

    event = {"output_ids": [5, 6, 7], "meta_info": {
        "finish_reason": {"type": "stop", "matched": 7}, "weight_version": 3,
        "weight_versions": [{"version": "2", "start": 0, "end": 1}, {"version": "3", "start": 1, "end": 3}],
        "cached_tokens": 9, "cached_tokens_details": {"device": 4, "storage": 5},
        "spec_verify_ct": 2, "spec_num_correct_drafts": 1, "num_retractions": 1,
        "output_token_logprobs": [[-0.5, 5, None], [-1.0, 6, None], [-2.0, 7, None]],
        "output_top_logprobs": [[[-0.5, 5, None]], None, [[-2.0, 7, None], [-3.0, 8, None]]],
        "input_token_logprobs": [[None, 1, None], [-4.0, 2, None]], "input_top_logprobs": [None, [[-4.0, 2, None]]]}}
    answer = ChunkAnswer.parse(event)
    assert answer.output_ids == [5, 6, 7] and answer.finish_type == "stop" and answer.weight_version == "3"
    assert answer.weight_spans == [("2", 0, 1), ("3", 1, 3)]
    assert answer.cached_tokens == 9 and answer.cached_details == {"device": 4, "host": 0, "storage": 5}
    assert (answer.verify_steps, answer.accepted_drafts, answer.retractions) == (2, 1, 1)
    assert answer.output_logprobs(1, 3) == [-1.0, -2.0]
    assert answer.output_top_logprobs(1, 3) == [[], [(7, -2.0), (8, -3.0)]]
    assert answer.input_logprobs() == [(None, 1), (-4.0, 2)] and answer.input_top_logprobs() == [None, [(-4.0, 2)]]
    bare = ChunkAnswer.parse({"output_ids": [1], "meta_info": {"finish_reason": None}})
    assert bare.finish_type is None and bare.weight_version is None and bare.cached_details is None
    assert (bare.cached_tokens, bare.verify_steps, bare.retractions, bare.output_logprobs(0, 1)) == (0, 0, 0, [])


def test_a_chunk_request_sends_logprob_fields_only_when_asked():
    from seer_sglang.wire import ChunkRequest

    plain = ChunkRequest(rid="g-0-c1", input_ids=[1, 2], sampling_params={"max_new_tokens": 4},
                         logprob_start_len=-1, top_logprobs_num=3).to_json()
    assert plain == {"rid": "g-0-c1", "input_ids": [1, 2], "sampling_params": {"max_new_tokens": 4},
                     "return_logprob": False}
    full = ChunkRequest(rid="g-0-c0", input_ids=[1], sampling_params={}, return_logprob=True, logprob_start_len=0,
                        top_logprobs_num=2, priority=5, custom_logit_processor="{}").to_json()
    assert (full["logprob_start_len"], full["top_logprobs_num"], full["priority"], full["custom_logit_processor"]) \
        == (0, 2, 5, "{}")


def test_sampling_supports_are_asked_for_and_read_per_position():
    """A chunk asks for SGLang's sampling support only for a sample that wants it, with its mode; the
    answer's per-token supports and behaviour logprobs (one float, or one per support token) are read
    by position, as the frontend joins them over chunks."""
    from seer_sglang.wire import ChunkAnswer, ChunkRequest

    asked = ChunkRequest(rid="g-0-c1", input_ids=[1], sampling_params={},
                         sampling_logprobs_mode="support").to_json()
    assert (asked["return_sampling_mask"], asked["sampling_logprobs_mode"]) == (True, "support")
    assert "return_sampling_mask" not in ChunkRequest(rid="g-0-c1", input_ids=[1], sampling_params={}).to_json()
    answer = ChunkAnswer.parse({"output_ids": [4, 9, 2], "meta_info": {
        "output_token_sampling_mask": [[4, 3], [9], [2, 8, 1]],
        "output_token_sampling_logprobs": [[-0.2, -1.7], [0.0], [-0.5, -1.5, -2.0]]}})
    assert answer.sampling_masks(1, 3) == [[9], [2, 8, 1]]
    assert answer.sampling_logprobs(0, 2) == [[-0.2, -1.7], [0.0]]
    selected = ChunkAnswer.parse({"output_ids": [4], "meta_info": {"output_token_sampling_mask": [[4, 3]],
                                                                   "output_token_sampling_logprobs": [-0.2]}})
    assert selected.sampling_logprobs(0, 1) == [-0.2]
    assert ChunkAnswer.parse({"output_ids": [4], "meta_info": {}}).sampling_masks(0, 1) == []


def test_instance_meta_keys_seer_does_not_build_join_over_chunks_as_one_request_answers_them():
    from seer_sglang.core.request import Sample, SamplingParams

    first = ChunkAnswer.parse({"output_ids": [1, 2, 3], "meta_info": {
        "id": "g-0-c0", "cached_tokens": 4, "spec_verify_ct": 2, "e2e_latency": 0.1,  # seer's own: not passed
        "top_p_token_ids": [[1], [2, 5], [3]], "reasoning_tokens": 2, "queue_time": 0.5,
        "cached_tokens_details": {"device": 4}, "dp_rank": 0}})
    assert set(first.passed) == {"top_p_token_ids", "reasoning_tokens", "queue_time", "cached_tokens_details",
                                 "dp_rank"}
    second = ChunkAnswer.parse({"output_ids": [7, 8], "meta_info": {
        "top_p_token_ids": [[7], [8]], "reasoning_tokens": 1, "queue_time": 0.25,
        "cached_tokens_details": {"device": 9}, "dp_rank": 1, "late_key": ["a", "b"]}})
    sample = Sample(rid="g-0", group_id="g", index=0, prompt_ids=[9], params=SamplingParams(max_new_tokens=8))
    for answer in (first, second):
        base = sample.generated
        sample.output_ids += answer.output_ids
        sample.add_meta(answer.passed, base)
    assert sample.meta() == {"top_p_token_ids": [[1], [2, 5], [3], [7], [8]], "reasoning_tokens": 3,
                             "queue_time": 0.75, "cached_tokens_details": {"device": 4}, "dp_rank": 1,
                             "late_key": [None, None, None, "a", "b"]}
    sample.keep_tokens(4)  # a stop string found across the chunks
    assert sample.meta()["top_p_token_ids"] == [[1], [2, 5], [3], [7]]
    assert sample.meta()["late_key"] == [None, None, None, "a"]
    sample.restart()
    assert sample.meta() == {}


def test_an_agent_loops_rids_name_its_trajectory():
    from seer_sglang.frontend.native import rid_trajectory

    assert rid_trajectory("traj7-0") == rid_trajectory("traj7-1") == rid_trajectory("traj7") != rid_trajectory("traj8-1")
    assert rid_trajectory("t:3") == rid_trajectory("t_4") == rid_trajectory("t/5") == rid_trajectory("t.6")
    assert rid_trajectory("9f0c1d2e") == "rid:9f0c1d2e"  # a rid without a turn number is its own trajectory
    assert rid_trajectory("x-") == "rid:x-" and rid_trajectory("-5") == "rid:-5"
