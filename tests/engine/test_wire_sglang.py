"""Where seer's wire format meets SGLang's: the OpenAI fields SGLang would drop, its idle-connection
timeout and its scheduler's output count."""


def test_openai_requests_refuse_sampling_fields_they_would_drop():
    from seer_sglang.frontend.protocol import ChatCompletionRequest, CompletionRequest

    msgs = [{"role": "user", "content": "x"}]
    assert CompletionRequest(prompt="x", min_p=0.2).refused_field()[0] == "min_p"
    assert CompletionRequest(prompt="x", regex="a+").refused_field()[0] == "regex"
    # honoured fields, neutral values and extras that do not touch sampling pass
    assert ChatCompletionRequest(messages=msgs, frequency_penalty=0.5, repetition_penalty=1.2, min_tokens=3,
                                 logit_bias={"3": 1.0}, min_p=0, user="u", metadata={"a": 1}).refused_field() is None
    assert CompletionRequest(prompt="x", skip_special_tokens=False).skip_special_tokens is False


def test_the_instance_client_drops_idle_connections_before_sglang_closes_them():
    from sglang.srt.environ import envs

    from seer_sglang.frontend.instance_client import KEEPALIVE_EXPIRY_S

    assert KEEPALIVE_EXPIRY_S < envs.SGLANG_TIMEOUT_KEEP_ALIVE.get() / 2


def test_earlier_output_follows_the_schedulers_count():
    """Without overlap SGLang has counted every earlier output token when a step samples; under overlap
    the count trails a step and covers the prompt's last token, so the seed does the same."""
    from seer_sglang.plugin.penalties import earlier_output

    prompt, output = [11, 12, 13], [21, 22, 23, 24]
    assert earlier_output(prompt + output, 4, trailing=False) == output
    assert earlier_output(prompt + output, 4, trailing=True) == [13, 21, 22, 23]
    assert earlier_output(prompt, 0, trailing=False) == []


def test_a_chunk_request_is_a_body_sglangs_generate_takes():
    from dataclasses import fields

    from sglang.srt.managers.io_struct import GenerateReqInput

    from seer_sglang.wire import ChunkRequest

    assert {f.name for f in fields(ChunkRequest)} <= {f.name for f in fields(GenerateReqInput)}
    body = ChunkRequest(rid="g-0-c0", input_ids=[1, 2], sampling_params={"max_new_tokens": 2}, return_logprob=True,
                        logprob_start_len=-1, top_logprobs_num=1, priority=2).to_json()
    GenerateReqInput(**body).normalize_batch_and_arguments()


def test_the_retraction_counters_the_rollout_benchmark_reads_are_sglangs():
    """A mode's retractions and retracted tokens are differences of these counters; a name SGLang does
    not keep would read as 0 on every instance, so each must be one SGLang registers, and the tokens
    the retracted requests' prompts and outputs as the scheduler counts them."""
    import inspect

    from sglang.srt.managers import scheduler
    from sglang.srt.observability import metrics_collector

    from benchmarks.harness.sglang_router import RETRACTED_TOKENS, RETRACTIONS

    registered = inspect.getsource(metrics_collector)
    for name in (RETRACTIONS, *RETRACTED_TOKENS.values()):
        assert f'name="{name}"' in registered, name
    counted = inspect.getsource(scheduler)
    assert "len(r.origin_input_ids) for r in retracted_reqs" in counted
    assert "len(r.output_ids) for r in retracted_reqs" in counted
