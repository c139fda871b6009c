"""The Seer frontend (FastAPI): OpenAI + rollout APIs, health, metrics, and admin fan-out."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ..instances.client import InstanceClient
from ..kvpool.file_pool import FilePool
from ..rollout.engine import EngineHooks, RolloutEngine
from ..rollout.policy import make_policy
from . import openai_api, rollout_api
from .errors import APIError, install_error_handlers
from .frontend import Frontend, ModelInfo
from .metrics import Metrics
from .protocol import AbortRequest, SchedulerRequest
from .tokenizer import PromptTokenizer

logger = logging.getLogger("seer_sglang.server")


async def _describe_model(client: InstanceClient, model_path: str | None) -> ModelInfo:
    try:
        info = await client.server_info()
    except Exception as e:  # the instance may be down now and come back later
        if model_path is None:
            raise RuntimeError(f"cannot reach {client.url} to learn the model; pass --model-path") from e
        logger.warning("cannot reach %s (%s); describing the model from %s", client.url, e, model_path)
        info = {}
    path = model_path or info.get("model_path")
    context = info.get("context_length")
    if not context:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(path)
        context = getattr(config, "max_position_embeddings", None) or 4096
    return ModelInfo(served_name=info.get("served_model_name") or path, model_path=path, context_length=int(context))


def create_app(instance_urls: list[str], *, scheduler: str = "context", model_path: str | None = None,
               policy_kwargs: dict[str, Any] | None = None, kv_pool: FilePool | None = None,
               kv_pool_kind: str | None = None, kv_pool_page_size: int = 16) -> FastAPI:
    """Build the app; the engine starts in the lifespan, once the instances answer."""
    metrics = Metrics()

    async def pool_janitor(engine: RolloutEngine, idle_clear_s: float = 30.0, every_s: float = 5.0) -> None:
        """Keep the pool under its bound, drop pages half-written by killed instances, and empty it
        once the engine has been idle a while, so a finished rollout's pages do not pile up on disk."""
        idle_since, cleared = None, True
        while True:
            await asyncio.sleep(every_s)
            try:
                await asyncio.to_thread(kv_pool.enforce_bound)
                await asyncio.to_thread(kv_pool.remove_stale_partials)
                if engine.buffer.groups:
                    idle_since, cleared = None, False
                elif not cleared:
                    idle_since = idle_since or asyncio.get_running_loop().time()
                    if asyncio.get_running_loop().time() - idle_since >= idle_clear_s:
                        removed = await asyncio.to_thread(kv_pool.clear)
                        logger.info("engine idle: cleared %d pages from the KV pool", removed)
                        cleared = True
                metrics.kv_pool_bytes.set(await asyncio.to_thread(kv_pool.usage_bytes))
                metrics.kv_pool_evicted.set(kv_pool.evicted_files)
            except Exception:  # the janitor must never stop the frontend
                logger.exception("KV pool janitor")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        clients = [InstanceClient(url, i) for i, url in enumerate(instance_urls)]
        model = await _describe_model(clients[0], model_path)
        tokenizer = await asyncio.to_thread(PromptTokenizer, model.model_path)
        policy = make_policy(scheduler, **(policy_kwargs or {}))
        hooks = EngineHooks(on_sample_done=metrics.on_sample_done, on_load=metrics.on_load,
                            find_stop=tokenizer.find_stop,
                            pool_probe=_pool_probe(kv_pool, kv_pool_kind, kv_pool_page_size))
        engine = RolloutEngine(clients, policy, hooks=hooks)
        await engine.start()
        janitor = asyncio.create_task(pool_janitor(engine)) if kv_pool is not None else None
        app.state.frontend = Frontend(engine, tokenizer, model, metrics)
        app.state.kv_pool = kv_pool
        logger.info("frontend ready: %d instances, scheduler=%s, model=%s (context %d)",
                    len(clients), policy.name, model.served_name, model.context_length)
        try:
            yield
        finally:
            if janitor is not None:
                janitor.cancel()
            await engine.stop()

    app = FastAPI(title="seer_sglang", lifespan=lifespan)
    install_error_handlers(app)
    app.include_router(openai_api.router)
    app.include_router(rollout_api.router)

    @app.middleware("http")
    async def count_requests(request: Request, call_next):
        response = await call_next(request)
        route = request.scope.get("route")
        endpoint = getattr(route, "path", "unmatched")
        metrics.requests.labels(endpoint, str(response.status_code)).inc()
        return response

    @app.get("/health")
    async def health(request: Request):
        fe: Frontend = request.app.state.frontend
        healthy = fe.engine.healthy_count()
        body = {"status": "ok" if healthy else "unavailable", "healthy_instances": healthy,
                "instances": len(fe.engine.clients)}
        return JSONResponse(body, status_code=200 if healthy else 503)

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/instances")
    async def instances(request: Request):
        fe: Frontend = request.app.state.frontend
        return {"instances": [{"index": v.index, "url": fe.engine.clients[v.index].url, "healthy": v.healthy,
                               "running": v.running, "waiting": v.waiting, "used_tokens": v.used_tokens,
                               "capacity_tokens": v.capacity_tokens, "inflight_chunks": v.inflight}
                              for v in fe.engine.views]}

    @app.get("/kv_pool")
    async def kv_pool_info(request: Request):
        """The global KV pool as the frontend sees it (``file``): where, how big, what was evicted."""
        pool: FilePool | None = request.app.state.kv_pool
        if pool is None:
            return {"kind": kv_pool_kind or "none"}
        return {"kind": "file", "directory": str(pool.directory), "page_size": pool.page_size,
                "bytes": await asyncio.to_thread(pool.usage_bytes), "max_bytes": pool.max_bytes,
                "evicted_pages": pool.evicted_files}

    @app.get("/scheduler")
    async def get_scheduler(request: Request):
        return _policy_json(request.app.state.frontend.engine.policy)

    @app.post("/scheduler")
    async def set_scheduler(body: SchedulerRequest, request: Request):
        """Switch the rollout policy between rollouts (benchmarks compare policies on one server)."""
        fe: Frontend = request.app.state.frontend
        try:
            policy = make_policy(body.name, **body.model_dump(exclude={"name"}))
        except ValueError as e:
            raise APIError(str(e), param="name") from e
        try:
            fe.engine.set_policy(policy)
        except RuntimeError as e:
            raise APIError(str(e), 409, code="rollout_in_flight") from e
        logger.info("scheduler is now %s", _policy_json(policy))
        return _policy_json(policy)

    @app.get("/timeline")
    async def timeline(request: Request, since: float = 0.0):
        """Per-instance telemetry over time: KV usage, running/waiting, in-flight chunks, retractions."""
        fe: Frontend = request.app.state.frontend
        points = [dataclasses.asdict(p) for p in fe.engine.timeline if p.t >= since]
        return {"points": points, "retractions": list(fe.engine.retractions)}

    async def clear_pool() -> int:
        return await asyncio.to_thread(kv_pool.clear) if kv_pool is not None else 0

    async def fan_out(fe: Frontend, path: str, body: dict[str, Any] | None) -> JSONResponse:
        results = await asyncio.gather(*(c.post_admin(path, body) for c in fe.engine.clients))
        per_instance = [{"instance": c.index, "url": c.url, "status": status, "body": content}
                        for c, (status, content) in zip(fe.engine.clients, results)]
        ok = all(status == 200 for status, _ in results)
        return JSONResponse({"success": ok, "instances": per_instance}, status_code=200 if ok else 502)

    @app.post("/abort_request")
    async def abort_request(req: AbortRequest, request: Request):
        fe: Frontend = request.app.state.frontend
        if req.abort_all:
            aborted = fe.engine.abort_all()
        else:
            if not req.rid:
                raise APIError("give rid (a group id, sample rid or SGLang rid) or abort_all=true", param="rid")
            samples = fe.engine.find(req.rid)
            for sample in samples:
                fe.engine.abort_sample(sample)
            aborted = len(samples)
        response = await fan_out(fe, "/abort_request", req.model_dump())
        response.headers["x-seer-aborted-samples"] = str(aborted)
        return response

    @app.post("/pause_generation")
    async def pause_generation(request: Request):
        fe: Frontend = request.app.state.frontend
        fe.engine.set_paused(True)
        return await fan_out(fe, "/pause_generation", await _json_body(request))

    @app.post("/continue_generation")
    async def continue_generation(request: Request):
        fe: Frontend = request.app.state.frontend
        fe.engine.set_paused(False)
        return await fan_out(fe, "/continue_generation", await _json_body(request))

    @app.post("/flush_cache")
    async def flush_cache(request: Request):
        """Empty every instance's radix cache and the global KV pool (between benchmark modes)."""
        response = await fan_out(request.app.state.frontend, "/flush_cache", None)
        response.headers["x-seer-pool-pages-cleared"] = str(await clear_pool())
        return response

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request):
        fe: Frontend = request.app.state.frontend
        body = await _json_body(request)
        if not isinstance(body, dict) or not body.get("model_path"):
            raise APIError("model_path is required", param="model_path")
        # The pool's pages were computed by the old weights: a continuation must never load them.
        await clear_pool()
        response = await fan_out(fe, "/update_weights_from_disk", body)
        await clear_pool()  # and whatever an in-flight write put there meanwhile
        return response

    return app


def _pool_probe(kv_pool: FilePool | None, kind: str | None, page_size: int):
    """How much of a context the pool holds: a file pool's page files are checked; a Mooncake store
    is not queried, its write-through is taken as done (whole pages), so moves are priced as loads."""
    if kv_pool is not None:
        return kv_pool.pooled_tokens
    if kind == "mooncake":
        from ..kvpool.cost import MigrationCost

        whole_pages = MigrationCost(page_size=page_size).pooled
        return lambda ids: whole_pages(len(ids))
    return None


def _policy_json(policy) -> dict[str, Any]:
    fields = ("chunk_size", "kv_headroom", "starvation_bound")
    return {"name": policy.name, **{f: getattr(policy, f) for f in fields if hasattr(policy, f)}}


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as e:
        raise APIError(f"invalid JSON body: {e}") from e
