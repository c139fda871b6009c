"""Grouped speculative decoding, the pure part: draft trees, the suffix-automaton drafters (with their
C core in ``native``), the draft budget and lossless tree acceptance.

Never imports SGLang or the serving layers: the SGLang worker (``seer_sglang.plugin``), the draft
server and the simulator call the same objects.
"""
