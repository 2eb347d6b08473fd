"""Real PyTorch programs run unchanged under turbo_torch (tests/programs/*.py; only the framework
import differs): each runs once under torch and once under turbo_torch with torch made unimportable,
from the same initial weights, and the per-step losses must agree within 1e-4 relative over 50 steps."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")

PROGRAMS = pathlib.Path(__file__).resolve().parent.parent / "programs"
NAMES = ["mlp_quickstart", "cnn_batchnorm", "char_lstm", "transformer_classifier", "linear_regression"]


def run(name, backend, extra_env):
    env = dict(os.environ, TB_PROGRAM_BACKEND=backend, TORCHBURN_NUM_THREADS="1", OMP_NUM_THREADS="1", **extra_env)
    result = subprocess.run([sys.executable, str(PROGRAMS / f"{name}.py")], cwd=PROGRAMS, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{name} under {backend}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.parametrize("name", NAMES)
def test_program_matches_torch(name, tmp_path):
    state = tmp_path / "state.npz"
    run(name, "torch", {"TB_PROGRAM_SAVE": str(state)})
    expected = json.loads(run(name, "torch", {"TB_PROGRAM_STATE": str(state)}).strip().splitlines()[-1])["losses"]
    got = json.loads(run(name, "turbo", {"TB_PROGRAM_STATE": str(state)}).strip().splitlines()[-1])["losses"]
    assert len(got) == len(expected) == 50
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    assert np.mean(got[-8:]) < np.mean(got[:8])  # it learns (batches cycle, so compare whole cycles)
