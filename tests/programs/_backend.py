"""Shared by the program scripts: picks the framework from TB_PROGRAM_BACKEND ("torch" or "turbo"),
loads the initial state written by the test (numpy .npz, so neither side needs the other), and prints
the per-step losses as JSON. Under "turbo", importing torch is made impossible first."""
import json
import os
import sys
import time

import numpy as np

BACKEND = os.environ.get("TB_PROGRAM_BACKEND", "torch")
if BACKEND == "turbo":
    sys.modules["torch"] = None  # the program must not reach PyTorch


def framework():
    threads = int(os.environ.get("TB_PROGRAM_THREADS", "0"))  # the training benchmark sets it
    if BACKEND == "turbo":
        import turbo_torch
        if threads:
            __import__("torchburn").set_num_threads(threads)
        return turbo_torch
    import torch
    if threads:
        torch.set_num_threads(threads)
    return torch


STEPS = int(os.environ.get("TB_PROGRAM_STEPS", "50"))  # training steps (the benchmark runs more)
_start = [None]


def load_initial_state(torch, model):
    path = os.environ.get("TB_PROGRAM_STATE")
    if path:
        # np.array(copy) keeps 0-d entries 0-d (ascontiguousarray would make them 1-d)
        state = {k: torch.from_numpy(np.array(v, copy=True, order="C")) for k, v in np.load(path).items()}
        model.load_state_dict(state)
    _start[0] = time.perf_counter()  # every program calls this right before its training loop
    return model


def save_state(model, path):
    np.savez(path, **{k: v.detach().numpy() for k, v in model.state_dict().items()})


def report(losses):
    out = {"losses": [float(x) for x in losses]}
    if _start[0] is not None:
        out["loop_seconds"] = time.perf_counter() - _start[0]  # read by python -m torchburn.bench eager --training
    print(json.dumps(out))
