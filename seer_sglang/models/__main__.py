"""``python -m seer_sglang.models {tiny,smollm2,tiny-smollm2}``: prepare a model, print its path as the last line."""

import argparse
import sys

from . import MODEL_NAMES, is_ready, prepare


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m seer_sglang.models")
    parser.add_argument("name", choices=MODEL_NAMES)
    args = parser.parse_args()
    if not is_ready(args.name):
        print(f"[models] building {args.name} ...", file=sys.stderr, flush=True)
    print(prepare(args.name))


if __name__ == "__main__":
    main()
