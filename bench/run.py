"""Single entry point of the benchmark harness: `python bench/run.py --help`.

Runs kbroker, librdkafka's mock cluster and Redis Streams one after another in the same
invocation on this machine, each on a fresh data directory and stopped before the next
starts, then prints one table and the same-run ratios. See bench/README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
