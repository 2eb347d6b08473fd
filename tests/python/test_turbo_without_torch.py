"""turbo_torch must work where PyTorch cannot be imported: a training-style program in a subprocess
whose `import torch` fails."""
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None  # any `import torch` now raises ImportError
    try:
        import torch  # noqa: F401
        raise SystemExit("torch was importable")
    except ImportError:
        pass
    import turbo_torch as torch
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    x = torch.randn(8, 4)
    y = torch.randn(8, 3)
    losses = []
    for _ in range(20):
        loss = ((torch.tanh(x @ w + b) - y) ** 2).mean()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
            b -= 0.1 * b.grad
        w.grad = None
        b.grad = None
    assert losses[-1] < losses[0], losses
    assert "torch" not in sys.modules or sys.modules["torch"] is None
    print("ok", round(losses[0], 4), round(losses[-1], 4))
""")


def test_program_runs_without_torch():
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok")
