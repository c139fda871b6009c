#!/usr/bin/env bash
# Install if needed, then serve: K SGLang instances (2 on CPU) + the Seer frontend on 127.0.0.1:30000.
# Extra arguments go to `python -m seer_sglang.launch_server` (Seer's and SGLang's flags).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
exec "$ROOT/.venv/bin/python" -m seer_sglang.launch_server "$@"
