"""``python -m seer_sglang.draft_server --bind tcp://127.0.0.1:5571``."""

from .server import main

if __name__ == "__main__":
    main()
