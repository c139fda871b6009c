"""The Seer frontend (FastAPI), assembled: the engine over the instances, the routes, metrics and the
KV pool's janitor. The routes live in ``routes/``, one module per concern."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fastapi import FastAPI
from sglang.srt.utils.auth import add_api_key_middleware

from ..config import SeerConfig
from ..core.policy import make_policy
from ..core.step_model import emulated_move_cost
from .engine import EngineHooks, RolloutEngine
from .errors import install_error_handlers
from .instance_client import InstanceClient
from .kv_pool import PoolAccess, janitor
from .metrics import Metrics
from .middleware import BoundBody, CountRequests
from .openapi import install_schema
from .routes import admin, benchmarking, discovery, lora, native, observability, openai, rollout, weights, workers
from .state import Frontend, ModelInfo
from .tokenizer import PromptTokenizer

logger = logging.getLogger("seer_sglang.frontend")


async def describe_model(client: InstanceClient | None, model_path: str | None) -> ModelInfo:
    """The model from the first instance's server info, or from ``model_path`` where that instance does
    not answer or there is none yet (a server whose instances register with ``POST /workers``)."""
    if client is None:
        if model_path is None:
            raise RuntimeError("no instance to learn the model from; pass --model-path")
        info = {}
    else:
        try:
            info = await client.server_info()
        except Exception as e:  # the instance may be down now and come back later
            if model_path is None:
                raise RuntimeError(f"cannot reach {client.url} to learn the model; pass --model-path") from e
            logger.warning("cannot reach %s (%s); describing the model from %s", client.url, e, model_path)
            info = {}
    media = None  # whether the model takes images or audio (SGLang's /model_info says)
    if client is not None and info:
        status, model_info = await client.get("/model_info")
        if status == 200 and isinstance(model_info, dict):
            media = bool(model_info.get("has_image_understanding") or model_info.get("has_audio_understanding"))
    path = model_path or info.get("model_path")
    context = info.get("context_length")
    if not context:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(path)
        context = getattr(config, "max_position_embeddings", None) or 4096
    return ModelInfo(served_name=info.get("served_model_name") or path, model_path=path, context_length=int(context),
                     tp_size=int(info.get("tp_size") or 1), page_size=info.get("page_size"),
                     lora=bool(info.get("enable_lora") or info.get("lora_paths")) if info else None,
                     routed_experts=bool(info.get("enable_return_routed_experts")) if info else None, media=media,
                     speculative=info.get("speculative_algorithm") or None,
                     sampling_mask_max_tokens=info.get("sampling_mask_max_tokens"))


def create_app(instance_urls: list[str], config: SeerConfig | None = None, *, model_path: str | None = None,
               pool: PoolAccess | None = None, supervisor: Any = None) -> FastAPI:
    """Build the app; the engine starts in the lifespan, once the instances answer. ``supervisor``
    (``launch.supervisor.Supervisor``): restarts the instances this process started when they exit."""
    config = config or SeerConfig()
    pool = pool or PoolAccess()
    metrics = Metrics()

    def report_pool(usage_bytes: int, evicted: int) -> None:
        metrics.kv_pool_bytes.set(usage_bytes)
        metrics.kv_pool_evicted.set(evicted)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        keys = {"api_key": config.frontend.api_key, "admin_api_key": config.frontend.admin_api_key,
                "config": config.rollout}
        clients = [InstanceClient(url, i, **keys) for i, url in enumerate(instance_urls)]
        model = await describe_model(clients[0] if clients else None, model_path)
        tokenizer = await asyncio.to_thread(PromptTokenizer, model.model_path)
        e = config.emulation
        migration = emulated_move_cost(e.profile, e.length_scale, e.time_scale)
        if migration is not None:
            logger.info("moves priced by the emulated profile: a 1,000-token re-prefill %.3f s, a decode token %.3f s",
                        migration.recompute_s(1000), migration.decode_s_per_token)
        policy = make_policy(config.scheduler.name, page_size=model.page_size, migration=migration,
                             **config.scheduler.policy_kwargs())
        def weights_changed(version: str) -> None:
            """Pages of earlier weights can no longer be loaded (they are keyed by version): drop them."""
            asyncio.get_running_loop().create_task(pool.clear())

        hooks = EngineHooks(on_sample_done=metrics.on_sample_done, on_chunk_done=metrics.on_chunk_done,
                            on_load=metrics.on_load, on_slo_report=metrics.on_slo_report,
                            find_stop=tokenizer.find_stop, pool_probe=pool.probe(),
                            on_weight_version=weights_changed)
        engine = RolloutEngine(clients, policy, hooks=hooks,
                               mixed_weight_versions=config.rollout.mixed_weight_versions,
                               instance_down_s=config.rollout.instance_down_s, slo_headroom=config.slo.headroom)
        await engine.start()
        sweeper = None
        app.state.supervisor = supervisor
        if pool.file_pool is not None:
            sweeper = asyncio.create_task(janitor(pool.file_pool, engine.idle, report_pool,
                                                  config.kv_pool.idle_clear_s))
        app.state.frontend = Frontend(engine, tokenizer, model, metrics, pool,
                                      group_window_s=config.frontend.group_window_ms / 1000,
                                      max_request_samples=config.frontend.max_request_samples,
                                      max_samples_in_flight=config.frontend.max_samples_in_flight,
                                      instance_args=keys, move_cost=migration)
        app.state.loop = asyncio.get_running_loop()
        if supervisor is not None:  # a restarted instance takes work once it runs the current weights
            supervisor.on_exit = app.state.frontend.hold
            supervisor.on_started = app.state.frontend.readmit_restarted
        watcher = asyncio.create_task(supervisor.run()) if supervisor is not None else None
        logger.info("frontend ready: %d instances, scheduler=%s, model=%s (context %d)",
                    len(clients), policy.name, model.served_name, model.context_length)
        try:
            yield
        finally:
            for task in (sweeper, watcher):
                if task is not None:
                    task.cancel()
            await engine.stop()

    app = FastAPI(title="seer_sglang", lifespan=lifespan)
    install_error_handlers(app)
    for routes in (openai, native, rollout, admin, weights, lora, workers, discovery, observability, benchmarking):
        # The routes themselves, not an included router: SGLang's auth middleware finds a route's auth
        # level on the app's own routes.
        app.router.routes.extend(routes.router.routes)
    install_schema(app, {r.path for routes in (admin, weights, lora) for r in routes.router.routes})
    if config.frontend.api_key or config.frontend.admin_api_key:
        # SGLang's own rules: the API key for every route, the admin key (if set) for admin routes;
        # /health and /metrics stay open for probes and scrapers.
        add_api_key_middleware(app, api_key=config.frontend.api_key, admin_api_key=config.frontend.admin_api_key)

    app.add_middleware(CountRequests, count=lambda route, status: metrics.requests.labels(route, status).inc())
    # outermost: a body over the bound is refused before anything else reads it
    app.add_middleware(BoundBody, max_bytes=int(config.frontend.max_body_mb * 2**20))

    return app
