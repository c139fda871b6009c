"""Build the native suffix automaton: ``python -m seer_sglang.speculative.native [--force]``."""

import sys

from seer_sglang.speculative.native import build

if __name__ == "__main__":
    results = build(force="--force" in sys.argv[1:])
    for kind, where in results.items():
        print(f"{kind}: {where}")
    sys.exit(0 if any(not w.startswith("error") for w in results.values()) else 1)
