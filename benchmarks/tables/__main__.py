"""``python -m benchmarks.tables``."""

from benchmarks.tables import main

raise SystemExit(main())
