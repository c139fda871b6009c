"""The order of one instance's waiting queue under the router's priorities.

The router ranks every chunk it sends (``Launch.priority``, higher first). Inside an instance the
waiting queue is re-sorted, stably: groups by the best priority among their waiting members, then the
members of a group together (they share a prompt in the radix cache), each group's members by their
own priority. Requests without a priority keep their order among themselves, behind the ranked ones.

The plugin applies this order to SGLang's waiting queue (``plugin.queue_order``) and the simulator to
its instances' queues, so both serve the same order.
"""

from __future__ import annotations

from typing import Sequence

UNRANKED = -(2**62)


def group_first_order(tags: Sequence[tuple[str | None, str, int | None]]) -> list[int] | None:
    """The queue's new order as positions into ``tags`` (each ``(group or None, own id, priority)``),
    or None where no grouped request carries a priority (keep the queue as it is)."""
    if not any(group is not None and prio is not None for group, _, prio in tags):
        return None
    best: dict[str, int] = {}
    first_pos: dict[str, int] = {}
    keys = []
    for pos, (group, own_id, prio) in enumerate(tags):
        key = group if group is not None else own_id
        value = prio if prio is not None else UNRANKED
        best[key] = max(best.get(key, value), value)
        first_pos.setdefault(key, pos)
        keys.append((key, value))
    return sorted(range(len(tags)), key=lambda pos: (-best[keys[pos][0]], first_pos[keys[pos][0]],
                                                     -keys[pos][1], pos))
