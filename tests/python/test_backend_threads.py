"""The compile backend's threads: its plans run on PyTorch's OpenMP team (TORCHBURN_PARALLEL_RUNTIME=auto),
so no second set of threads competes for the cores; ``pool`` keeps torchburn's own threads. Each case is a
fresh interpreter (the choice is made once per process, at the first compile)."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

PROGRAM = """
import os, warnings, torch, torchburn
torch.manual_seed(0)
torch.set_num_threads({torch_threads})
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
x = torch.randn(64, 256)
torch.randn(1 << 20).sum()  # PyTorch's OpenMP team exists before the compiled calls
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compiled = torch.compile(model, backend="torchburn")
    with torch.no_grad():
        for _ in range(3):
            got = compiled(x)
    loss = compiled(x).square().sum()
    loss.backward()
with torch.no_grad():
    torch.testing.assert_close(got, model(x))
grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
model(x).square().sum().backward()
for g, p in zip(grads, model.parameters()):
    torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-4)
stats = torchburn.profiling_stats()
names = [open(f"/proc/self/task/{{t}}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print("runtime", torchburn.cpu_info()["parallel_runtime"])
print("threads", torchburn.get_num_threads())
print("cores", torchburn.cpu_info()["physical_cores"])
print("pool_threads", sum(n.startswith("torchburn-") for n in names))
print("plan_calls", stats["calls"])
print("fallback_calls", stats["fallback_calls"])
print("warnings", sum("TORCHBURN_PARALLEL_RUNTIME" in str(w.message) for w in caught))
"""


def run(setting, torch_threads=2, extra=None):
    env = dict(os.environ, TORCHBURN_QUIET="1")
    env.pop("TORCHBURN_NUM_THREADS", None)
    env.pop("RAYON_NUM_THREADS", None)
    if setting is None:
        env.pop("TORCHBURN_PARALLEL_RUNTIME", None)
    else:
        env["TORCHBURN_PARALLEL_RUNTIME"] = setting
    env.update(extra or {})
    code = textwrap.dedent(PROGRAM.format(torch_threads=torch_threads))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())


def openmp_is_torch_backend():
    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


@pytest.mark.skipif(not openmp_is_torch_backend(), reason="this PyTorch build does not use OpenMP")
def test_plans_run_on_pytorchs_openmp_team():
    facts = run(None)
    assert facts["runtime"] == "openmp"
    assert facts["pool_threads"] == "0"  # no torchburn-N worker was ever started
    assert facts["threads"] == "2"
    # the work was ours: 3 inference calls, a training forward and its backward, all native
    assert int(facts["plan_calls"]) >= 5 and facts["fallback_calls"] == "0"


@pytest.mark.skipif(not openmp_is_torch_backend(), reason="this PyTorch build does not use OpenMP")
def test_thread_count_follows_torch_set_num_threads_unless_set_explicitly():
    assert run("auto", torch_threads=1)["threads"] == "1"
    facts = run("auto", torch_threads=1, extra={"TORCHBURN_NUM_THREADS": "2"})
    assert facts["threads"] == "2" and facts["runtime"] == "openmp"


def test_pool_setting_keeps_torchburns_threads():
    facts = run("pool")
    assert facts["runtime"] == "pool"
    assert facts["threads"] == facts["cores"]  # the pool's own default, not torch's setting
    assert int(facts["pool_threads"]) == int(facts["cores"]) - 1
    assert int(facts["plan_calls"]) >= 5 and facts["fallback_calls"] == "0"


def test_unknown_setting_warns_and_uses_auto():
    facts = run("fastest")
    assert facts["warnings"] == "1"
    assert facts["runtime"] == ("openmp" if openmp_is_torch_backend() else "pool")


def test_set_parallel_runtime_rejects_bad_names():
    import torchburn

    with pytest.raises(ValueError, match="expected 'pool' or 'openmp'"):
        torchburn._C.set_parallel_runtime("gpu")
    with pytest.raises(TypeError):
        torchburn._C.set_parallel_runtime(1)
