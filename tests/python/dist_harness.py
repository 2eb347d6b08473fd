"""Runs a worker script in 2 gloo processes on this machine (for the DDP / FSDP2 tests): each rank gets
`rank store` as arguments and prints one JSON line last; returns the parsed lines by rank."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


def run_two_ranks(worker_source: str, tmp_path, timeout: float = 600) -> list:
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(worker_source))
    store = tmp_path / "store"
    env = dict(os.environ, TORCHBURN_QUIET="1", OMP_NUM_THREADS="1", TORCHBURN_NUM_THREADS="1")
    workers = [subprocess.Popen([sys.executable, str(script), str(rank), str(store)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env) for rank in range(2)]
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=timeout)
        assert worker.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results
