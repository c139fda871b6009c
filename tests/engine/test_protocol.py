"""The OpenAI routes take SGLang's own request fields: each is honoured, inert, or refused by name
away from SGLang's default. Checked against SGLang's protocol models, so a field SGLang adds is
covered without a change here."""

from __future__ import annotations

import pytest
from sglang.srt.entrypoints.openai import protocol as sglang_protocol

from seer_sglang.frontend import protocol

CASES = [(protocol.ChatCompletionRequest, sglang_protocol.ChatCompletionRequest,
          {"messages": [{"role": "user", "content": "hi"}], "model": "m"}),
         (protocol.CompletionRequest, sglang_protocol.CompletionRequest, {"prompt": "hi", "model": "m"})]


@pytest.mark.parametrize("ours, theirs, minimal", CASES)
def test_sglangs_own_defaults_are_accepted(ours, theirs, minimal):
    body = theirs(**minimal).model_dump(exclude_none=True)
    assert ours(**body).refused_field() is None


@pytest.mark.parametrize("ours, theirs, minimal", CASES)
def test_every_undeclared_sglang_field_is_refused_away_from_its_default(ours, theirs, minimal):
    undeclared = [name for name in theirs.model_fields
                  if name not in ours.model_fields and name not in protocol._INERT]
    assert "watermark" in undeclared and "session_params" in undeclared  # change tokens / the context
    for name in undeclared:
        request = ours(**minimal, **{name: "not-the-default"})
        assert request.refused_field() is not None and request.refused_field()[0] == name, name


@pytest.mark.parametrize("ours, theirs, minimal", CASES)
def test_inert_fields_and_unknown_extras_are_accepted(ours, theirs, minimal):
    assert ours(**minimal, user="u1", priority=3, metadata={"run": 7}).refused_field() is None


def test_refusal_rules_keep_their_reasons():
    refused = protocol.ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], min_p=0.1).refused_field()
    assert refused is not None and refused[0] == "min_p" and "seeded sampler" in refused[1]


def test_what_the_openai_routes_would_drop_is_refused():
    """``echo`` is not applied, and streamed chunks carry no logprobs: asked for, each is refused by
    name rather than answered without."""
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert protocol.CompletionRequest(prompt="hi", echo=True).refused_field()[0] == "echo"
    assert protocol.CompletionRequest(prompt="hi", stream=True, logprobs=2).refused_field()[0] == "logprobs"
    assert protocol.CompletionRequest(prompt="hi", logprobs=2).refused_field() is None
    assert protocol.ChatCompletionRequest(**chat, stream=True, logprobs=True).refused_field()[0] == "logprobs"
    assert protocol.ChatCompletionRequest(**chat, stream=True).refused_field() is None


def test_the_generate_schema_describes_seers_own_checks():
    """Bodies built from the served schema reach the handler: its sampling params carry their bounds,
    and custom params their reserved keys, so a schema-driven client never builds one seer refuses."""
    import jsonschema

    from seer_sglang.frontend.openapi import generate_fields

    components: dict = {}
    fields = generate_fields(components)
    sampling = fields["sampling_params"]["anyOf"][0]
    ok = {"max_new_tokens": 8, "n": 2, "temperature": 1.0, "custom_params": {"mine": 1}}
    jsonschema.validate(ok, sampling)
    for bad in ({"n": 0}, {"top_p": 0}, {"custom_params": {"__seer_slo__": 1}}, {"custom_params": {"__req__": 1}},
                {"min_p": 0.1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, sampling)
    slo = {**components["SLOField"], "components": {"schemas": components}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"ttft_ms": 0}, slo)
