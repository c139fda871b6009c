"""BENCHMARKS ONLY: switching the rollout policy of a running server, so a benchmark compares
policies on the same instances. Production runs pick their policy with ``--scheduler``."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from sglang.srt.utils.auth import AuthLevel, auth_level

from ...core.policy import make_policy
from ..errors import APIError
from ..protocol import SchedulerRequest
from .common import frontend, policy_json

router = APIRouter()
logger = logging.getLogger("seer_sglang.frontend")


@router.post("/scheduler")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def set_scheduler(body: SchedulerRequest, request: Request):
    """Switch the rollout policy between rollouts."""
    fe = frontend(request)
    try:
        page_size = None if body.align_to_pages is False else fe.model.page_size
        policy = make_policy(body.name, page_size=page_size, migration=fe.move_cost,
                             **body.model_dump(exclude={"name", "align_to_pages"}))
    except ValueError as e:
        raise APIError(str(e), param="name") from e
    try:
        fe.engine.set_policy(policy)
    except RuntimeError as e:
        raise APIError(str(e), 409, code="rollout_in_flight") from e
    logger.info("scheduler is now %s", policy_json(policy))
    return policy_json(policy)
