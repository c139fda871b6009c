#!/usr/bin/env bash
# Install if needed, then run the test suite against real SGLang engines on this machine.
# Extra arguments go to pytest (e.g. -k openai, -m "not slow").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest -ra "$@"
