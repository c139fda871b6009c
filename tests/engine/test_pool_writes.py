"""A finished chunk waits for its pool writes, but a pool that stops acknowledging them costs one
bounded wait, not one per answer, until it acknowledges again."""

from __future__ import annotations

from seer_sglang.plugin.pool_writes import WriteBreaker, flush_to_pool


class Tree:
    """The few parts of SGLang's HiCache tree that the flush touches; ``acks`` says whether the pool
    acknowledges a pending write when the queues are drained."""

    cache_controller = object()
    enable_storage = True
    buffer_pipeline = None
    linker = None

    def __init__(self, pending: int, acks: bool):
        self.ongoing_backup = dict.fromkeys(range(pending))
        self.acks = acks
        self.drains = 0

    def flush_pending_backups(self):
        pass

    def writing_check(self, write_back: bool = False):
        assert write_back

    def _all_reduce(self, tensor, op):
        pass  # one rank

    def drain_storage_control_queues(self):
        self.drains += 1
        if self.acks and self.ongoing_backup:
            self.ongoing_backup.popitem()


def test_breaker_doubles_its_cooldown_and_closes():
    b = WriteBreaker(min_cooldown_s=10, max_cooldown_s=25)
    assert not b.is_open(0.0)
    assert b.trip(100.0) == 10 and b.is_open(109.9) and not b.is_open(110.1)
    assert b.trip(110.1) == 20 and b.trip(130.2) == 25  # doubling, up to the bound
    assert b.close() and not b.is_open(131.0) and not b.close()
    assert b.trip(200.0) == 10  # closed again: the next trip starts from the shortest cooldown


def test_acknowledged_writes_are_waited_for():
    tree, breaker = Tree(pending=5, acks=True), WriteBreaker()
    assert flush_to_pool(tree, 5.0, breaker)
    assert not tree.ongoing_backup and tree.drains == 5 and breaker.trips == 0


def test_a_pool_that_stops_acknowledging_costs_one_wait_then_none_until_it_acknowledges():
    breaker = WriteBreaker()
    down = Tree(pending=3, acks=False)
    assert not flush_to_pool(down, 0.05, breaker)  # waits the bound once
    assert breaker.trips == 1 and down.drains > 0
    drains = down.drains
    assert not flush_to_pool(down, 0.05, breaker)  # open: answers at once
    assert down.drains == drains and breaker.trips == 1
    # The pool acknowledges again: a round that finds nothing pending closes the breaker, and the next
    # answer waits for its writes again.
    assert flush_to_pool(Tree(pending=0, acks=True), 0.05, breaker)
    assert not breaker.is_open(0.0) and breaker.cooldown_s == 0
    up = Tree(pending=2, acks=True)
    assert flush_to_pool(up, 5.0, breaker) and up.drains == 2


def test_without_a_breaker_every_answer_waits_the_bound():
    tree = Tree(pending=1, acks=False)
    assert not flush_to_pool(tree, 0.02)
    drains = tree.drains
    assert not flush_to_pool(tree, 0.02) and tree.drains > drains
