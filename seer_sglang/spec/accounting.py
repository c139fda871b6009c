"""What speculative decoding bought a sample or a rollout: verify steps and accepted draft tokens.

Mean acceptance length = tokens emitted per verify step = (accepted drafts + steps) / steps, the
figure Seer reports (1.0 = no draft ever accepted).
"""

from __future__ import annotations

from typing import Iterable

from ..rollout.request import Sample


def spec_totals(samples: Iterable[Sample]) -> dict[str, float | int | None]:
    steps = accepted = 0
    for sample in samples:
        for chunk in sample.chunks:
            steps += chunk.draft_steps
            accepted += chunk.accepted_tokens
    return {"draft_steps": steps, "accepted_tokens": accepted,
            "mean_acceptance_length": (accepted + steps) / steps if steps else None}
