"""python -m torchburn.bench eager: per-call cost of turbo_torch vs PyTorch eager vs NumPy (the floor),
same process, one thread each, medians of repeated timed loops."""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any, Callable, Dict, List, Optional


def _per_call(fn: Callable[[], Any], seconds: float) -> float:
    """Median seconds per call over 7 batches sized to take about seconds/7 each."""
    fn()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed > 0.02 or n > 1 << 22:
            break
        n *= 4
    batch = max(1, int(n * (seconds / 7) / max(elapsed, 1e-9)))
    samples = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - start) / batch)
    return statistics.median(samples)


def _cases(tt: Any, torch: Any, np: Any) -> List[Dict[str, Any]]:
    def make(module: Any, name: str) -> Dict[str, Callable[[], Any]]:
        return {}

    rows = []

    def row(name: str, build: Callable[[Any], Callable[[], Any]], numpy_build: Optional[Callable[[], Callable[[], Any]]] = None):
        rows.append({"name": name, "build": build, "numpy": numpy_build})

    def tensors(m: Any, *shapes: Any, grad: bool = False) -> List[Any]:
        out = []
        for i, s in enumerate(shapes):
            t = m.randn(*s)
            if grad:
                t.requires_grad_(True)
            out.append(t)
        return out

    def b_add(m):
        a, b = tensors(m, (8,), (8,))
        return lambda: a + b
    row("a + b (8 floats)", b_add, lambda: (lambda a, b: lambda: a + b)(np.ones(8, np.float32), np.ones(8, np.float32)))

    def b_scalar(m):
        (x,) = tensors(m, (8,))
        return lambda: x * 2.0
    row("x * 2.0 (8 floats)", b_scalar, lambda: (lambda x: lambda: x * np.float32(2.0))(np.ones(8, np.float32)))

    def b_grad(m):
        (x,) = tensors(m, (1,), grad=True)
        return lambda: 2 * x
    row("2 * x, requires_grad (1 elem)", b_grad, None)

    def b_relu(m):
        (x,) = tensors(m, (8,))
        return lambda: m.relu(x)
    row("relu(x) (8 floats)", b_relu, lambda: (lambda x: lambda: np.maximum(x, 0))(np.ones(8, np.float32)))

    def b_sum(m):
        (x,) = tensors(m, (8,))
        return lambda: x.sum()
    row("x.sum() (8 floats)", b_sum, lambda: (lambda x: lambda: x.sum())(np.ones(8, np.float32)))

    def b_slice(m):
        (x,) = tensors(m, (8,))
        return lambda: x[1:3]
    row("x[1:3]", b_slice, lambda: (lambda x: lambda: x[1:3])(np.ones(8, np.float32)))

    def b_view(m):
        (x,) = tensors(m, (8,))
        return lambda: x.view(2, 4)
    row("x.view(2, 4)", b_view, lambda: (lambda x: lambda: x.reshape(2, 4))(np.ones(8, np.float32)))

    for n in (32, 64):
        def b_mm(m, n=n):
            a, b = tensors(m, (n, n), (n, n))
            return lambda: a @ b
        row(f"matmul {n}x{n}", b_mm, lambda n=n: (lambda a, b: lambda: a @ b)(np.ones((n, n), np.float32),
                                                                              np.ones((n, n), np.float32)))

    def b_chain(m):
        (x,) = tensors(m, (1000,))

        def run():
            y = x
            for _ in range(25):
                y = y * 1.0001
                y = y + 0.5
                y = y - 0.5
                y = m.relu(y)
            return y
        return run

    def np_chain():
        x = np.ones(1000, np.float32)

        def run():
            y = x
            for _ in range(25):
                y = y * np.float32(1.0001)
                y = y + np.float32(0.5)
                y = y - np.float32(0.5)
                y = np.maximum(y, 0)
            return y
        return run
    row("100-op elementwise chain (1000 floats)", b_chain, np_chain)

    def b_train(m):
        x, w, b = tensors(m, (64, 64), (64, 64), (64,))
        w.requires_grad_(True)
        b.requires_grad_(True)

        def run():
            loss = m.tanh(x @ w + b).sum()
            loss.backward()
            w.grad = None
            b.grad = None
        return run
    row("fwd+bwd tanh(x @ w + b).sum() (64x64)", b_train, None)

    def b_module(m):
        layer = m.nn.Linear(64, 64)
        (x,) = tensors(m, (1, 64))
        return lambda: layer(x)
    row("Linear(64, 64) module call (batch 1)", b_module, None)

    for name, op in (("a + b", lambda a, b: a + b), ("exp(x)", lambda a, b: a.exp()), ("x.sum()", lambda a, b: a.sum())):
        def b_big(m, op=op):
            a, b = tensors(m, (1 << 20,), (1 << 20,))
            return lambda: op(a, b)
        row(f"{name} (1M floats)", b_big, lambda op=op: (lambda a, b: lambda: (
            a + b if op.__code__.co_code == (lambda a, b: a + b).__code__.co_code else np.exp(a)
            if "exp" in name else a.sum()))(np.ones(1 << 20, np.float32), np.ones(1 << 20, np.float32)))

    for foreach in (False, True):  # turbo_torch always takes its C foreach step; torch both ways
        def b_adam(m, foreach=foreach):
            params = tensors(m, *[(64, 64)] * 100, grad=True)
            for p in params:
                p.grad = m.randn(64, 64)
            return m.optim.Adam(params, lr=1e-3, foreach=foreach).step
        row(f"Adam step, 100 tensors of 64x64 (torch foreach={foreach})", b_adam, None)
    # the MLP quickstart's parameters (784x512, 512x512, 512x10 and biases: 669,706 floats)
    mlp_shapes = [(512, 784), (512,), (512, 512), (512,), (10, 512), (10,)]
    for label, options in (("lr=1e-2", {"lr": 1e-2}),
                           ("momentum 0.9, nesterov, weight_decay 1e-4",
                            {"lr": 1e-2, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4})):
        for foreach in (False, True):
            def b_sgd(m, options=options, foreach=foreach):
                params = tensors(m, *mlp_shapes, grad=True)
                for p in params:
                    p.grad = m.randn(*p.shape) * 1e-3
                return m.optim.SGD(params, foreach=foreach, **options).step
            row(f"SGD step, MLP quickstart parameters, {label} (torch foreach={foreach})", b_sgd, None)
    return rows


# ---- --training: the programs of tests/programs/ (turbo_torch vs torch), module call, Adam, compile ----

PROGRAMS = [("mlp_quickstart", "MLP quickstart (batch 64, DataLoader, SGD)", 2.0),
            ("cnn_batchnorm", "CNN + BatchNorm/Dropout", 1.2), ("char_lstm", "char-LSTM", 2.0),
            ("transformer_classifier", "2-layer Transformer classifier", 1.2),
            ("linear_regression", "linear regression + ReduceLROnPlateau", None)]


def _programs_dir() -> Any:
    import pathlib
    here = pathlib.Path(__file__).resolve()
    for parent in here.parents:  # an editable install runs from the checkout; tests/ is beside python/
        candidate = parent / "tests" / "programs"
        if candidate.is_dir():
            return candidate
    return None


def _program_loop_seconds(path: Any, backend: str, threads: int, steps: int) -> float:
    """One run of the program as a plain script with TB_PROGRAM_STEPS=steps: the seconds of its training
    loop (timed by tests/programs/_backend.py from load_initial_state to report)."""
    import json
    import subprocess
    import sys
    env = dict(os.environ, TB_PROGRAM_BACKEND=backend, TB_PROGRAM_THREADS=str(threads), TB_PROGRAM_STEPS=str(steps),
               TORCHBURN_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    result = subprocess.run([sys.executable, str(path)], cwd=path.parent, env=env, capture_output=True, text=True,
                            timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"{path.name} under {backend}: {result.stderr.strip()[-500:]}")
    out = json.loads(result.stdout.strip().splitlines()[-1])
    if len(out["losses"]) != steps:
        raise RuntimeError(f"{path.name} ran {len(out['losses'])} steps, not {steps}")
    return out["loop_seconds"]


def _program_steps_per_s(path: Any, backend: str, threads: int, steps: int, min_seconds: float = 0.3) -> float:
    """Steady-state steps/s: (steps - 10) / (loop seconds of steps - loop seconds of 10 steps), so the
    first steps' one-time costs (lazy initialisation, allocator warm-up) cancel out. A program whose
    steps take less than min_seconds beyond the first 10 is run longer (up to 100x the steps), so that
    the jitter of those one-time costs stays small against the difference; a difference that is still
    not positive is an error, never a made-up rate."""
    cap = steps * 100
    while True:
        long = _program_loop_seconds(path, backend, threads, steps)
        short = _program_loop_seconds(path, backend, threads, 10)
        difference = long - short
        if difference >= min_seconds or steps >= cap:
            break
        steps = min(cap, int(steps * 1.5 * min_seconds / max(difference, 1e-3)) + 1)
    if difference <= 0:
        raise RuntimeError(f"{path.name} under {backend}: {steps} steps took {long:.4f} s, no longer than "
                           f"10 steps ({short:.4f} s); the machine is too noisy to measure it")
    return (steps - 10) / difference


def _fmt(s: float) -> str:
    return f"{s * 1e6:.2f} µs" if s < 1e-3 else f"{s * 1e3:.3f} ms"


def _compile_models(tt: Any) -> List[tuple]:
    """(label, model in eval mode, input, target) for the compile rows: the MLP of the quickstart, the
    per-op-overhead bound small MLP, and the CNN, Transformer encoder classifier and char-LSTM of
    tests/programs/."""
    nn = tt.nn

    class Classifier(nn.Module):  # tests/programs/transformer_classifier.py
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(50, 32)
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 3)

        def forward(self, x: Any) -> Any:
            return self.head(self.encoder(self.embed(x)).mean(1))

    class CharLM(nn.Module):  # tests/programs/char_lstm.py
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(50, 16)
            self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
            self.head = nn.Linear(32, 50)

        def forward(self, x: Any) -> Any:
            out, _ = self.lstm(self.embed(x))
            return self.head(out)

    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                        nn.Linear(512, 10))
    small = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(64, 64), nn.GELU())])
    cnn = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Dropout(0.3), nn.Linear(8, 4))
    tokens = tt.from_numpy(__import__("numpy").random.default_rng(2).integers(0, 50, (16, 12)))
    return [("MLP forward (batch 64)", mlp.eval(), tt.randn(64, 1, 28, 28), ">= 1.5x"),
            ("4 x (Linear(64,64) + GELU), batch 1", small.eval(), tt.randn(1, 64), "-"),
            ("CNN + BatchNorm eval (batch 32, 12x12)", cnn.eval(), tt.randn(32, 1, 12, 12), "-"),
            ("2-layer Transformer encoder classifier eval (16 x 12 tokens)", Classifier().eval(), tokens, "-"),
            ("char-LSTM language model eval (16 x 32 tokens)", CharLM().eval(),
             tt.from_numpy(__import__("numpy").random.default_rng(3).integers(0, 50, (16, 32))), "-")]


def _compile_row(tt: Any, model: Any, x: Any, seconds: float) -> tuple:
    """(eager s, compiled s) per no_grad forward call, interleaved (3 rounds, medians) so that load from
    other processes hits both alike. Raises when the model was not captured whole."""
    compiled = tt.compile(model)
    with tt.no_grad():
        compiled(x)
        before = tt.compiler.stats()["replays"]
        compiled(x)
        if compiled.last_reason is not None or tt.compiler.stats()["replays"] != before + 1:
            raise RuntimeError(f"the compiled model did not replay: {compiled.last_reason}")
        eager, fast = [], []
        for _ in range(3):
            eager.append(_per_call(lambda: model(x), seconds / 3))
            fast.append(_per_call(lambda: compiled(x), seconds / 3))
    return statistics.median(eager), statistics.median(fast)


def training(seconds: float, runs: int, only: Optional[List[str]], steps: int) -> int:
    import numpy as np
    import torchburn
    import turbo_torch as tt
    import torch
    info = torchburn.cpu_info()
    print(f"CPU: {info['brand']} ({info['vendor']}), ISA {info['isa']}, {os.cpu_count()} logical CPUs; "
          f"torch {torch.__version__}, numpy {np.__version__}, Python {platform.python_version()}")
    print(f"programs: tests/programs/*.py as plain scripts (one process per run); steady-state steps/s = "
          f"(N - 10) / (loop seconds of N steps - loop seconds of 10 steps), N = {steps} or more for a program "
          f"faster than 0.3 s, median of {runs} runs")
    print()
    print("| workload | threads | turbo_torch | torch eager | ratio | target |")
    print("|---|---|---|---|---|---|")
    directory = _programs_dir()
    for name, label, target in PROGRAMS:
        if only and name not in only:
            continue
        if directory is None:
            print(f"| {label} | - | tests/programs not found (run from a checkout) | | | |")
            continue
        for threads in (1, 2):
            ours = statistics.median(_program_steps_per_s(directory / f"{name}.py", "turbo", threads, steps)
                                     for _ in range(runs))
            theirs = statistics.median(_program_steps_per_s(directory / f"{name}.py", "torch", threads, steps)
                                       for _ in range(runs))
            goal = f">= {target}x" if target else "-"
            print(f"| {label} | {threads} | {ours:.1f} steps/s | {theirs:.1f} steps/s | {ours / theirs:.2f}x "
                  f"| {goal} |", flush=True)
    torchburn.set_num_threads(1)
    torch.set_num_threads(1)
    for case in _cases(tt, torch, np):
        if case["name"].startswith(("Linear(64, 64)", "Adam step", "SGD step")):
            ours = _per_call(case["build"](tt), seconds)
            theirs = _per_call(case["build"](torch), seconds)
            goal = ">= 4x" if case["name"].startswith("Linear") else "-"
            print(f"| {case['name']} | 1 | {ours * 1e6:.2f} µs | {theirs * 1e6:.2f} µs | {theirs / ours:.2f}x "
                  f"| {goal} |", flush=True)
    for label, model, x, goal in _compile_models(tt):
        eager, fast = _compile_row(tt, model, x, seconds)
        print(f"| turbo_torch.compile {label}, no_grad, vs eager turbo_torch | 1 | {_fmt(fast)} | "
              f"{_fmt(eager)} (eager turbo) | {eager / fast:.2f}x | {goal} |", flush=True)
    print()
    print("ratio: torch's time / turbo_torch's (programs: turbo steps/s / torch steps/s); above 1: turbo_torch faster")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchburn.bench eager",
                                     description="Per-call time of turbo_torch vs PyTorch eager and NumPy.")
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement (default 0.5)")
    parser.add_argument("--training", action="store_true",
                        help="training steps/s of tests/programs/ at 1 and 2 threads, module call, Adam, compile")
    parser.add_argument("--runs", type=int, default=3, help="--training: runs per program (median; default 3)")
    parser.add_argument("--steps", type=int, default=210, help="--training: steps of the long run (default 210)")
    parser.add_argument("--programs", nargs="*", help="--training: only these programs (e.g. mlp_quickstart)")
    args = parser.parse_args(argv)
    if args.training:
        return training(args.seconds, args.runs, args.programs, args.steps)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import numpy as np
    import torchburn
    import turbo_torch as tt
    torchburn.set_num_threads(1)
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    info = torchburn.cpu_info()
    print(f"CPU: {info['brand']} ({info['vendor']}), ISA {info['isa']}, 1 thread each; "
          f"torch {getattr(torch, '__version__', 'absent')}, numpy {np.__version__}, Python {platform.python_version()}")
    print()
    print("| workload | turbo_torch | torch eager | numpy | vs torch | vs numpy |")
    print("|---|---|---|---|---|---|")
    for case in _cases(tt, torch, np):
        ours = _per_call(case["build"](tt), args.seconds)
        theirs = _per_call(case["build"](torch), args.seconds) if torch is not None else float("nan")
        floor = _per_call(case["numpy"](), args.seconds) if case["numpy"] else float("nan")

        def fmt(s: float) -> str:
            if s != s:
                return "-"
            return f"{s * 1e6:.2f} µs" if s < 1e-3 else f"{s * 1e3:.3f} ms"
        vs_numpy = f"{floor / ours:.2f}x" if floor == floor else "-"
        print(f"| {case['name']} | {fmt(ours)} | {fmt(theirs)} | {fmt(floor)} | {theirs / ours:.2f}x | {vs_numpy} |",
              flush=True)
    print()
    print("ratios: the other side's time / turbo_torch's time (above 1: turbo_torch is faster)")
    return 0
