"""The SLO batching plugin on SGLang's own verify state (torch tensors)."""

from __future__ import annotations


def test_parked_verify_state_is_padded_to_the_kept_rows_width_before_the_merge():
    """A parked row's accepted tokens are from the last step it ran in: a plain step leaves one per row,
    a verify step a row padded to its width; SGLang concatenates and reshapes by one width."""
    from types import SimpleNamespace as NS

    import torch

    from seer_sglang.plugin.slo_batching import same_width

    kept = NS(draft_token_num=3, accept_tokens=torch.tensor([1, 2, 0, 4, 0, 0]))  # 2 rows of a verify step
    parked = NS(draft_token_num=1, accept_tokens=torch.tensor([7, 8, 9]))  # 3 rows of a plain step
    same_width(kept, parked)
    assert parked.draft_token_num == kept.draft_token_num == 3
    merged = torch.cat([kept.accept_tokens, parked.accept_tokens]).view(-1, 3)
    assert merged[:, 0].tolist() == [1, 4, 7, 8, 9] and merged[2:, 1:].abs().sum() == 0
    same_width(None, parked)  # no verify state on one side (a plain batch): nothing to do
