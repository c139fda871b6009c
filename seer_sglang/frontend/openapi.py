"""The OpenAPI schema the frontend serves, made to say what its routes really take and answer.

Routes that forward SGLang's native bodies read them raw (they are checked against SGLang's own
request types, not a copy); their schema is those types' own (``sglang.srt.managers.io_struct``, as
JSON Schema through pydantic). Every error is an OpenAI-style body: bad input is a 400 (FastAPI would
document a 422), a refusal an instance gives is passed on (any 4xx), a fan-out an instance failed is
a 502, and a route that needs an instance answers 503 while none is healthy. Clients and fuzzers
(schemathesis, in the test suite) generate their requests from it."""

from __future__ import annotations

import re
import warnings
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from ..wire import GROUP_FIELD, GROUP_SIZE_FIELD, RESERVED_PARAMS

# Route -> SGLang's request type of its body.
SGLANG_BODIES = {
    "/generate": "GenerateReqInput",
    "/update_weights_from_disk": "UpdateWeightFromDiskReqInput",
    "/update_weights_from_tensor": "UpdateWeightsFromTensorReqInput",
    "/init_weights_update_group": "InitWeightsUpdateGroupReqInput",
    "/update_weights_from_distributed": "UpdateWeightsFromDistributedReqInput",
    "/destroy_weights_update_group": "DestroyWeightsUpdateGroupReqInput",
    "/release_memory_occupation": "ReleaseMemoryOccupationReqInput",
    "/resume_memory_occupation": "ResumeMemoryOccupationReqInput",
    "/pause_generation": "PauseGenerationReqInput",
    "/continue_generation": "ContinueGenerationReqInput",
    "/begin_weight_update": "BeginWeightUpdateReqInput",
    "/end_weight_update": "EndWeightUpdateReqInput",
    "/load_lora_adapter": "LoadLoRAAdapterReqInput",
    "/load_lora_adapter_from_tensors": "LoadLoRAAdapterFromTensorsReqInput",
    "/unload_lora_adapter": "UnloadLoRAAdapterReqInput",
}
INTERNAL_FIELDS = ("http_worker_ipc",)  # set by SGLang's HTTP server for its own processes
# Routes answered from the frontend's own state, which never wait on an instance.
NO_INSTANCE_NEEDED = ("/metrics", "/v1/models", "/list_workers", "/workers", "/scheduler", "/kv_pool",
                      "/timeline", "/instances", "/add_worker", "/remove_worker")
FAN_OUT_MODULES = ("admin", "weights")

ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message"],
    "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                   "param": {"type": ["string", "null"]}, "code": {"type": ["string", "integer", "null"]}}}}}


def _sglang_body(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """JSON Schema of SGLang's request type ``name``, and the definitions it refers to."""
    from sglang.srt.managers import io_struct

    schema = TypeAdapter(getattr(io_struct, name)).json_schema(ref_template="#/components/schemas/{model}")
    definitions = schema.pop("$defs", {})
    for field in INTERNAL_FIELDS:
        schema.get("properties", {}).pop(field, None)
    return schema, definitions


def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def generate_fields(components: dict[str, Any]) -> dict[str, Any]:
    """What ``/generate`` checks beyond SGLang's types (``frontend/native.py``), as JSON Schema: the
    sampling parameters seer applies and their bounds, custom params without the reserved keys, the
    ``slo`` object and the group hints; so a schema-driven client (or fuzzer) builds bodies the
    handler takes."""
    from .protocol import SLOField

    slo = TypeAdapter(SLOField).json_schema(ref_template="#/components/schemas/{model}")
    components.update(slo.pop("$defs", {}))
    components["SLOField"] = slo
    reserved = "|".join(re.escape(k) for k in RESERVED_PARAMS)
    sampling = {"type": "object", "additionalProperties": False, "properties": {
        "max_new_tokens": {"type": ["integer", "null"], "minimum": 0},
        "min_new_tokens": {"type": "integer", "minimum": 0},
        "n": {"type": "integer", "minimum": 1, "maximum": 1024},
        "temperature": {"type": "number", "minimum": 0},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "top_k": {"type": "integer", "minimum": -1},
        "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
        "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
        "repetition_penalty": {"type": "number", "exclusiveMinimum": 0, "maximum": 2},
        "stop": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        "stop_token_ids": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0}},
        "ignore_eos": {"type": "boolean"}, "skip_special_tokens": {"type": "boolean"},
        "spaces_between_special_tokens": {"type": "boolean"}, "no_stop_trim": {"type": "boolean"},
        "sampling_seed": {"type": ["integer", "null"]},
        "custom_params": {"type": ["object", "null"],
                          "propertyNames": {"not": {"pattern": f"^({reserved}|__seer.*)$"}}},
    }}
    return {"sampling_params": {"anyOf": [sampling, {"type": "array", "items": sampling}]},
            "slo": {"$ref": "#/components/schemas/SLOField"},
            GROUP_FIELD: {"type": "string", "minLength": 1, "maxLength": 256},
            GROUP_SIZE_FIELD: {"type": "integer", "minimum": 1, "maximum": 1024}}


def install_schema(app: FastAPI, fan_out_paths: set[str]) -> None:
    """Serve the schema described above at ``/openapi.json``; ``fan_out_paths``: routes that call every
    instance and pass on their answers."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        with warnings.catch_warnings():  # FastAPI's duplicate ids for multi-method routes, renamed below
            warnings.simplefilter("ignore", UserWarning)
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["Error"] = ERROR_SCHEMA
        for path, operations in schema["paths"].items():
            for method, op in operations.items():
                op["operationId"] = f"{method}_{path.strip('/').replace('/', '_') or 'root'}"
                responses = op.setdefault("responses", {})
                responses.pop("422", None)
                responses["400"] = _error("bad input: the error names the field")
                responses["4XX"] = _error("refused (an instance's own refusal is passed on as it is)")
                if path not in NO_INSTANCE_NEEDED:
                    responses["503"] = _error("no healthy SGLang instance")
                if path in fan_out_paths:
                    responses["502"] = _error("an instance failed the call; each instance's answer is in the body")
                name = SGLANG_BODIES.get(path)
                if name is not None and method in ("post", "put"):
                    body, definitions = _sglang_body(name)
                    components.update(definitions)
                    if path == "/generate":  # seer's own fields beside SGLang's, and what it checks
                        body.setdefault("properties", {}).update(generate_fields(components))
                    op["requestBody"] = {"required": False, "content": {"application/json": {"schema": body}}}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi
