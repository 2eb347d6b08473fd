"""python -m torchburn.bench compile: the torch.compile backend against PyTorch eager and inductor.

For each model, in one process: the median per-call latency in steady state of eager PyTorch,
``torch.compile(backend="inductor")`` and ``torch.compile(backend="torchburn")`` (all under
``torch.no_grad()``, calls of the three interleaved in rounds so that machine noise hits them alike),
and the first-call time of both compilers (Dynamo capture + compilation + first run, from a reset
Dynamo, with inductor's on-disk caches disabled and torchburn's plan cache cleared). Compile times are
for a warm process: both compilers first compile a small unrelated model, and each model is captured
once by Dynamo before either compiler is timed on it.

Two grad-on tables follow: forward calls with grad enabled (the seed's calling style), and training
steps (gradients set to None, forward, ``output.sum().backward()``), which also time the compilers'
backward graphs.

A further table gives torchburn's per-call overhead for a cached plan: the wall time of a call minus the
time spent inside the plan's steps (the plan object accumulates it), i.e. importing the inputs and
allocating and exporting the outputs, against the target 5 us + 0.3 us per input/output; and the same
for the torch.compile'd call beyond the plan's own overhead (Dynamo's guards and wrappers). A third
table gives the fixed cost of a cached compiled call on 8 floats against eager and Dynamo's floors.

Models: seed (Linear 512->1024, GELU, Linear 1024->256; batch 32), mlp (the README MLP 784->256->10;
batch 64), resmlp (3 pre-norm residual blocks with SiLU, d 256; batch 64), cnn (3x conv/bn/relu,
pooling, linear; batch 8, 3x64x64), encoder (nn.TransformerEncoderLayer d 256, 4 heads, ffn 1024,
batch_first; batch 4, seq 128), gpt2 (a GPT-2 small block from transformers, random weights; seq 128);
not in the default set: gpt2lm (transformers' GPT2LMHeadModel, GPT-2 small's width, 4 layers; token ids
8 x 128, no cache) and bert (transformers' BertModel in all-MiniLM-L6-v2's shape; 8 x 128 with padding).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings
from typing import Any, Callable

from . import format_time, machine_facts, print_table


def build_models(torch: Any) -> dict:
    nn = torch.nn
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    class ResidualMLP(nn.Module):
        def __init__(self, d=256, hidden=512, blocks=3):
            super().__init__()
            self.inp = nn.Linear(128, d)
            self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(blocks))
            self.up = nn.ModuleList(nn.Linear(d, hidden) for _ in range(blocks))
            self.down = nn.ModuleList(nn.Linear(hidden, d) for _ in range(blocks))
            self.out = nn.Linear(d, 10)

        def forward(self, x):
            x = self.inp(x)
            for norm, up, down in zip(self.norms, self.up, self.down):
                x = x + down(nn.functional.silu(up(norm(x))))
            return self.out(x)

    def cnn():
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(64, 10))
        return model

    def gpt2():
        import transformers
        from transformers.models.gpt2.modeling_gpt2 import GPT2Block

        config = transformers.GPT2Config()  # GPT-2 small: d 768, 12 heads (random weights, nothing downloaded)
        config._attn_implementation = "sdpa"
        block = GPT2Block(config)

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = block

            def forward(self, x):
                out = self.block(x)
                return out[0] if isinstance(out, tuple) else out

        return Block()

    class Output(nn.Module):
        """A transformers model returning one tensor (logits or the last hidden state)."""

        def __init__(self, model, field):
            super().__init__()
            self.model, self.field = model, field

        def forward(self, *args):
            return getattr(self.model(*args, use_cache=False) if self.field == "logits" else self.model(*args),
                           self.field)

    def gpt2lm():
        import transformers

        config = transformers.GPT2Config(n_layer=4)  # GPT-2 small's width, 4 layers, random weights
        config._attn_implementation = "sdpa"
        return Output(transformers.GPT2LMHeadModel(config), "logits")

    def bert():
        import transformers

        # all-MiniLM-L6-v2's shape (d 384, 6 layers, 12 heads, ffn 1536), random weights
        config = transformers.BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                         intermediate_size=1536)
        config._attn_implementation = "sdpa"
        return Output(transformers.BertModel(config), "last_hidden_state")

    def token_ids(batch, length, padded):
        ids = torch.randint(0, 1000, (batch, length), generator=g)
        if not padded:
            return (ids,)
        mask = torch.ones(batch, length, dtype=torch.long)
        for row in range(batch):  # padding of 0..batch-1 eighths of the sequence: the masked-attention path
            mask[row, length - row * length // 8:] = 0
        return ids, mask

    return {
        "seed": (lambda: nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 256)), lambda: (randn(32, 512),)),
        "mlp": (lambda: nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)), lambda: (randn(64, 784),)),
        "resmlp": (ResidualMLP, lambda: (randn(64, 128),)),
        "cnn": (cnn, lambda: (randn(8, 3, 64, 64),)),
        "encoder": (lambda: nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True), lambda: (randn(4, 128, 256),)),
        "gpt2": (gpt2, lambda: (randn(1, 128, 768),)),
        "gpt2lm": (gpt2lm, lambda: token_ids(8, 128, False)),
        "bert": (bert, lambda: token_ids(8, 128, True)),
    }


def warm_up(torch: Any, inductor: bool) -> None:
    """Compiles a small unrelated model with each compiler once, so that first-use costs of the
    process (imports, Dynamo and the compilers' lazy initialisation) are not charged to the first
    model measured: the compile times below are for a model compiled in a warm process."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.LayerNorm(8)).eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        for backend in ["torchburn"] + (["inductor"] if inductor else []):
            torch._dynamo.reset()
            torch.compile(model, backend=backend)(x)
    torch._dynamo.reset()


def first_call_seconds(fn: Callable, inputs: tuple) -> float:
    start = time.perf_counter()
    fn(*inputs)
    return time.perf_counter() - start


def timed_backend(backend: Callable, spent: list) -> Callable:
    """A Dynamo backend that runs `backend` and appends the seconds it took to `spent` (the compiler's
    own share of a first call; the rest is Dynamo capturing the graph, the same for every backend)."""

    def run(gm, example_inputs):
        start = time.perf_counter()
        try:
            return backend(gm, example_inputs)
        finally:
            spent.append(time.perf_counter() - start)

    return run


def interleaved_medians(fns: dict, inputs: tuple, seconds: float, rounds: int = 8) -> dict:
    """Per callable: (median over all calls, median of its quietest block), in seconds.

    Calls are measured in blocks that rotate between the callables; each block starts with a short
    pause and a few unmeasured calls, because PyTorch's OpenMP workers and torchburn's pool both spin
    for a while after their last job and a block must not pay for the other runtime's threads. On a
    shared machine other processes disturb whole blocks: the quietest block's median (the lowest
    block median) is the steady-state figure, the overall median is reported next to it."""
    samples: dict = {name: [] for name in fns}
    block_medians: dict = {name: [] for name in fns}
    block = seconds / rounds
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(0.02)
            for _ in range(3):
                fn(*inputs)
            deadline = time.perf_counter() + block
            values = []
            while len(values) < 5 or time.perf_counter() < deadline:
                start = time.perf_counter()
                fn(*inputs)
                values.append(time.perf_counter() - start)
            samples[name].extend(values)
            block_medians[name].append(statistics.median(values))
    return {name: (statistics.median(samples[name]), min(block_medians[name])) for name in fns}


def call_overhead(plan: Any, fn: Callable, args: tuple, calls: int) -> float:
    """Seconds per call of fn(*args) spent outside `plan`'s steps (fn calls the plan once per call):
    the wall time of a batch of calls minus the growth of plan.run_seconds; the minimum over 8 batches
    (noise only adds)."""
    best = float("inf")
    for _ in range(8):
        time.sleep(0.005)
        fn(*args)
        inside = plan.run_seconds
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        wall = time.perf_counter() - start
        best = min(best, (wall - (plan.run_seconds - inside)) / calls)
    return best


def plan_overhead(torch: Any, model: Any, inputs: tuple, seconds: float) -> dict | None:
    """Per-call overhead of the model's plan (only for whole-graph plans), measured exactly rather than
    as a difference of two noisy medians: the plan object accumulates the time spent inside its steps
    (``run_seconds``), so wall time of a batch of calls minus that share is the time spent importing
    inputs, allocating and exporting outputs (plan call), plus Dynamo's guards and wrappers (compiled
    call). The minimum over several batches is reported (noise only adds)."""
    from torchburn import _C
    from torchburn.backend import torchburn_backend

    captured: list = []

    def capture(gm, example_inputs):
        fn = torchburn_backend(gm, example_inputs)
        captured.append((fn, list(example_inputs)))
        return fn

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=capture)
    compiled(*inputs)
    if len(captured) != 1 or not isinstance(captured[0][0], _C.Plan):
        return None
    plan, args = captured[0]
    args = tuple(args)
    calls = max(20, int(seconds / 16 / max(plan.run_timing(args, 3)[-1], 1e-6)))

    plan_call = call_overhead(plan, plan, args, calls)
    compiled_call = call_overhead(plan, compiled, inputs, calls)
    bare = statistics.median(plan.run_timing(args, calls))
    count = plan.num_inputs + plan.num_outputs
    return {"bare_run_s": bare, "overhead_s": plan_call, "dynamo_guard_s": compiled_call - plan_call,
            "inputs_outputs": count, "target_s": 5e-6 + 0.3e-6 * count}


def synthetic_overhead(torch: Any, count: int, seconds: float) -> dict:
    """Overhead of a plan whose work is negligible: `count` inputs of 4 floats, each doubled into its own
    output (so 2 * count inputs+outputs)."""
    from torchburn import _C

    table = _C.graph_op_table()
    graph = _C.Graph()
    for _ in range(count):
        value = graph.input("float32", (4,))
        graph.output(graph.node("binary_scalar", [value], {"op": table["binary"].index("mul"), "dtype": "float32",
                                                           "scalar": 2.0}))
    plan, _ = graph.compile()
    args = tuple(torch.randn(4) for _ in range(count))
    calls = 2000
    return {"bare_run_s": statistics.median(plan.run_timing(args, calls)),
            "overhead_s": call_overhead(plan, plan, args, calls),
            "inputs_outputs": 2 * count, "target_s": 5e-6 + 0.3e-6 * 2 * count}


def fixed_cost(torch: Any, seconds: float) -> list:
    """The fixed cost of a cached compiled call on 8 floats (``a + b``, ``relu(a * b + a)``): eager;
    Dynamo with a backend that computes nothing (returns a constant: Dynamo's own floor, guards and
    frame handling); Dynamo with a backend returning a Python function that calls the same torch ops
    (the floor of any backend that computes); torchburn; inductor. Per-call medians of the quietest
    block, calls interleaved. Rows of (workload, {implementation: seconds})."""
    a, b = torch.randn(8), torch.randn(8)
    workloads = {"a + b": (lambda x, y: x + y, lambda x, y: (torch.add(x, y),)),
                 "relu(a * b + a)": (lambda x, y: torch.relu(x * y + x), lambda x, y: (torch.relu(x * y + x),))}
    rows = []
    for name, (fn, python_backend_fn) in workloads.items():
        compiled = {}
        for label, backend in (("Dynamo, constant backend", lambda gm, example: (lambda *args: [a])),
                               ("Dynamo, Python backend", lambda gm, example, f=python_backend_fn: f),
                               ("torchburn", "torchburn"), ("inductor", "inductor")):
            torch._dynamo.reset()
            compiled[label] = torch.compile(fn, backend=backend)
            compiled[label](a, b)
        times = interleaved_medians({"eager": fn, **compiled}, (a, b), seconds)
        rows.append((name, {label: value[1] for label, value in times.items()}))
    return rows


def training_step(fn: Callable, params: list) -> Callable:
    """One training step of fn: gradients set to None, forward, ``sum().backward()``."""
    def step(*args: Any) -> None:
        for p in params:
            p.grad = None
        fn(*args).float().sum().backward()
    return step


def grad_on_medians(torch: Any, model: Any, inputs: tuple, expected: Any, inductor: bool, seconds: float) -> tuple:
    """Steady-state medians with grad enabled (eager, inductor, torchburn): of forward calls, and of
    training steps (gradients set to None, forward, ``sum().backward()``: the compiled backward too)."""
    fns = grad_on_fns(torch, model, inputs, expected, inductor)
    forward = interleaved_medians(fns, inputs, seconds)
    params = [p for p in model.parameters() if p.requires_grad]
    steps = {name: training_step(fn, params) for name, fn in fns.items()}
    for step in steps.values():  # the first backward compiles the backward graph
        step(*inputs)
    return forward, interleaved_medians(steps, inputs, seconds)


def train_mode_medians(torch: Any, model: Any, inputs: tuple, inductor: bool, seconds: float) -> dict:
    """Training steps as in grad_on_medians, with the model in train mode (dropout active). No
    answer is compared: each implementation draws its own dropout masks."""
    model.train()
    try:
        params = [p for p in model.parameters() if p.requires_grad]
        fns = {"eager": model}
        for backend in (["inductor"] if inductor else []) + ["torchburn"]:
            torch._dynamo.reset()
            fns[backend] = torch.compile(model, backend=backend)
            fns[backend](*inputs)
        if inductor:
            fns["inductor"] = torch.compile(model, backend="inductor")
            fns["inductor"](*inputs)
        steps = {name: training_step(fn, params) for name, fn in fns.items()}
        for step in steps.values():
            step(*inputs)
        return interleaved_medians(steps, inputs, seconds)
    finally:
        model.eval()


def grad_on_fns(torch: Any, model: Any, inputs: tuple, expected: Any, inductor: bool) -> dict:
    fns = {"eager": model}
    for backend in (["inductor"] if inductor else []) + ["torchburn"]:
        torch._dynamo.reset()
        fn = torch.compile(model, backend=backend)
        torch.testing.assert_close(fn(*inputs), expected, rtol=1e-3, atol=1e-3)
        fns[backend] = fn
    if inductor:  # the reset before torchburn dropped inductor's graph: recompile it next to torchburn's
        fns["inductor"] = torch.compile(model, backend="inductor")
        fns["inductor"](*inputs)
    return fns


def speed_row(name: str, times: dict) -> list:
    t_eager, t_burn = times["eager"][1], times["torchburn"][1]
    t_inductor = times["inductor"][1] if "inductor" in times else float("nan")
    have = t_inductor == t_inductor
    return [name, format_time(t_eager), format_time(t_inductor) if have else "-", format_time(t_burn),
            f"{t_eager / t_burn:.2f}x", f"{t_inductor / t_burn:.2f}x" if have else "-"]


def main(argv: list[str] | None = None) -> int:
    if argv and "--resnet" in argv:  # ResNet-18/50 rows (bench/resnet.py)
        from .resnet import main as resnet_main

        return resnet_main(argv)
    parser = argparse.ArgumentParser(prog="python -m torchburn.bench compile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="seed,mlp,resmlp,cnn,encoder,gpt2",
                        help="comma-separated subset of: seed, mlp, resmlp, cnn, encoder, gpt2, gpt2lm, bert")
    parser.add_argument("--seconds", type=float, default=1.0, help="measuring time per implementation and model")
    parser.add_argument("--no-inductor", action="store_true", help="skip inductor (it compiles slowly)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--train-mode", action="store_true",
                        help="also time training steps with the models in train mode (dropout active)")
    args = parser.parse_args(argv or [])

    os.environ.setdefault("TORCHBURN_QUIET", "1")
    import torch

    import torchburn
    from torchburn.backend import _share_pytorch_threads

    torchburn.register()
    _share_pytorch_threads()  # what the first compile does; done first so the facts line is right
    torch.set_num_threads(torchburn.get_num_threads())
    try:
        import torch._inductor.config as inductor_config

        inductor_config.force_disable_caches = True  # a cache hit would hide inductor's compile time
    except (ImportError, AttributeError):
        pass
    # Inductor's caches being off makes Dynamo warn once per compile; nothing to act on here.
    warnings.filterwarnings("ignore", message=".*force disabled by torch.compiler.config.force_disable_caches")
    models = build_models(torch)
    warm_up(torch, not args.no_inductor)
    rows, overhead_rows, grad_rows, train_rows, records = [], [], [], [], []
    train_mode_rows: list = []
    for name in args.models.split(","):
        make_model, make_inputs = models[name]
        torch.manual_seed(0)
        model = make_model().eval()
        inputs = make_inputs()
        with torch.no_grad():
            expected = model(*inputs)
            from torchburn.backend import torchburn_backend

            # one capture before timing anything: the first trace of a model's code pays one-time costs
            # (source inspection, lazy imports) that would go to whichever compiler ran first
            torch._dynamo.reset()
            torch.compile(model, backend="eager")(*inputs)
            torch._dynamo.reset()
            torchburn.cache_clear()
            burn_spent: list = []
            burn = torch.compile(model, backend=timed_backend(torchburn_backend, burn_spent))
            burn_compile = first_call_seconds(burn, inputs)
            burn_backend = sum(burn_spent)
            # never time a wrong answer (1e-3: models with long reductions in a different order)
            torch.testing.assert_close(burn(*inputs), expected, rtol=1e-3, atol=1e-3)
            fns = {"eager": model, "torchburn": burn}
            inductor_compile = inductor_backend = float("nan")
            inductor_spent: list = []
            if not args.no_inductor:
                from torch._inductor.compile_fx import compile_fx

                torch._dynamo.reset()
                inductor = torch.compile(model, backend=timed_backend(compile_fx, inductor_spent))
                inductor_compile = first_call_seconds(inductor, inputs)
                inductor_backend = sum(inductor_spent)
                torch.testing.assert_close(inductor(*inputs), expected, rtol=1e-3, atol=1e-3)
                fns["inductor"] = inductor
                # Dynamo keeps both compiled artifacts; re-enter torchburn's through its own wrapper
                torch._dynamo.reset()
                burn = torch.compile(model, backend="torchburn")
                burn(*inputs)
                fns["torchburn"] = burn
            times = interleaved_medians(fns, inputs, args.seconds)
            overhead = plan_overhead(torch, model, inputs, min(args.seconds, 0.5))
        grad_times, train_times = grad_on_medians(torch, model, inputs, expected, not args.no_inductor, args.seconds)
        grad_rows.append(speed_row(name, grad_times))
        train_rows.append(speed_row(name, train_times))
        train_mode_times = None
        if args.train_mode:
            train_mode_times = train_mode_medians(torch, model, inputs, not args.no_inductor, args.seconds)
            train_mode_rows.append(speed_row(name, train_mode_times))
        t_eager, t_burn = times["eager"][1], times["torchburn"][1]
        t_inductor = times["inductor"][1] if "inductor" in times else float("nan")
        overall = " / ".join(format_time(times[k][0]) for k in ("eager", "inductor", "torchburn") if k in times)
        rows.append([name, format_time(t_eager), format_time(t_inductor) if t_inductor == t_inductor else "-",
                     format_time(t_burn), f"{t_eager / t_burn:.2f}x",
                     f"{t_inductor / t_burn:.2f}x" if t_inductor == t_inductor else "-", overall,
                     f"{inductor_compile:.2f} s ({inductor_backend:.2f} s)" if inductor_spent else "-",
                     f"{burn_compile:.2f} s ({burn_backend:.2f} s)",
                     f"{inductor_compile / burn_compile:.1f}x ({inductor_backend / burn_backend:.0f}x)"
                     if inductor_spent else "-"])
        record = {"model": name, "eager_s": t_eager, "inductor_s": t_inductor, "torchburn_s": t_burn,
                  "overall_medians_s": {k: v[0] for k, v in times.items()},
                  "compile_inductor_s": inductor_compile, "compile_torchburn_s": burn_compile,
                  "backend_inductor_s": inductor_backend, "backend_torchburn_s": burn_backend,
                  "grad_on_s": {k: v[1] for k, v in grad_times.items()},
                  "training_step_s": {k: v[1] for k, v in train_times.items()}}
        if train_mode_times is not None:
            record["train_mode_step_s"] = {k: v[1] for k, v in train_mode_times.items()}
        if overhead:
            record["overhead"] = overhead
            overhead_rows.append([name, str(overhead["inputs_outputs"]), format_time(overhead["bare_run_s"]),
                                  format_time(overhead["overhead_s"]), format_time(overhead["target_s"]),
                                  format_time(overhead["dynamo_guard_s"])])
        records.append(record)
    for count in (1, 4, 16):
        overhead = synthetic_overhead(torch, count, min(args.seconds, 0.5))
        records.append({"model": f"synthetic {count}", "overhead": overhead})
        overhead_rows.append([f"synthetic: {count} x (4 floats -> x2)", str(overhead["inputs_outputs"]),
                              format_time(overhead["bare_run_s"]), format_time(overhead["overhead_s"]),
                              format_time(overhead["target_s"]), "-"])
    with torch.no_grad():
        fixed = fixed_cost(torch, min(args.seconds, 0.5))
    records.append({"model": "fixed cost", "rows": [{"workload": w, **t} for w, t in fixed]})
    if args.json:
        print(json.dumps({"machine": machine_facts(), "results": records}, indent=2))
        return 0
    print(machine_facts())
    print("per-call median latency in steady state under torch.no_grad() (median of the quietest of 8 blocks")
    print("per implementation; blocks alternate between them); speedup = other time / torchburn time;")
    print("all calls = median over every measured call (eager / inductor / torchburn), noise included;")
    print("compile = first call from a reset Dynamo (capture + compile + run), inductor caches disabled;")
    print("(in parentheses: the backend's own share, without Dynamo's graph capture)\n")
    print_table(["model", "eager", "inductor", "torchburn", "vs eager", "vs inductor", "all calls",
                 "compile inductor", "compile torchburn", "compile ratio"], rows)
    print("\ngrad on (the seed's calling style: parameters require grad, no torch.no_grad(), so the compilers")
    print("build a training graph and save activations for a backward); forward calls only, same medians:\n")
    print_table(["model", "eager", "inductor", "torchburn", "vs eager", "vs inductor"], grad_rows)
    print("\ntraining steps (grad on: gradients set to None, forward, output.sum().backward(); the backward")
    print("runs the compilers' backward graphs), same medians:\n")
    print_table(["model", "eager", "inductor", "torchburn", "vs eager", "vs inductor"], train_rows)
    if train_mode_rows:
        print("\ntraining steps in train mode (dropout active: each implementation draws its own masks), same")
        print("medians:\n")
        print_table(["model", "eager", "inductor", "torchburn", "vs eager", "vs inductor"], train_mode_rows)
    if overhead_rows:
        print("\nper-call overhead of a cached plan: wall time of a call minus the time inside its steps (the plan")
        print("counts it), i.e. importing inputs, allocating and exporting outputs; Dynamo guards = the same for")
        print("the torch.compile'd call, minus the plan's overhead (Dynamo's guards and wrappers):\n")
        print_table(["model", "inputs+outputs", "bare run", "overhead", "target", "Dynamo guards"], overhead_rows)
    print("\nfixed cost of a cached compiled call on 8 floats (median of the quietest block): Dynamo with a")
    print("backend that returns a constant is Dynamo's own floor; with one that returns a Python function")
    print("calling the same torch ops, the floor of any backend that computes:\n")
    labels = list(fixed[0][1])
    print_table(["workload"] + labels + ["torchburn - Python backend"],
                [[w] + [format_time(t[k]) for k in labels] + [format_time(t["torchburn"] - t["Dynamo, Python backend"])]
                 for w, t in fixed])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
