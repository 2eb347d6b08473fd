"""Native coverage of single-op cases under the torch.compile backend (docs/compile_backend.md).

Each case is one small function (an op and, where needed, what feeds it); torchburn.explain says how
many of its FX compute nodes run natively under no_grad. A case is "native" when all do, "partial"
when some do, "fallback" when none does. The values are checked against eager PyTorch.

Usage: python tools/op_coverage.py [case ...]      (prints a markdown table and the counts)
"""
import sys
import warnings

import torch
import torch.nn.functional as F

import torchburn

warnings.simplefilter("ignore")
torchburn.register()
x = torch.randn(4, 6)
i = torch.randint(0, 4, (4, 6))
j = torch.tensor([0, 2, 1])
b3 = torch.randn(2, 4, 5)
w = torch.ones(6)
CASES = {
    "argmax": (lambda x: x.argmax(1) , (x,)), "argmax_all": (lambda x: x.argmax(), (x,)), "argmin": (lambda x: x.argmin(0), (x,)),
    "max_dim": (lambda x: x.max(1)[0] + x.max(1)[1], (x,)), "min_dim": (lambda x: x.min(1, keepdim=True).values, (x,)),
    "cumsum": (lambda x: x.cumsum(1), (x,)), "cumprod": (lambda x: x.cumprod(0), (x,)), "logcumsumexp": (lambda x: x.logcumsumexp(1), (x,)),
    "prod": (lambda x: x.prod(1), (x,)), "prod_all": (lambda x: x.prod(), (x,)),
    "vector_norm": (lambda x: torch.linalg.vector_norm(x, dim=1), (x,)), "norm": (lambda x: x.norm(dim=-1, keepdim=True), (x,)),
    "norm_p1": (lambda x: x.norm(p=1), (x,)),
    "gather": (lambda x, i: x.gather(0, i), (x, i)), "scatter": (lambda x, i: torch.zeros(4,6).scatter(0, i, x), (x, i)),
    "scatter_add": (lambda x, i: torch.zeros(4,6).scatter_add(0, i, x), (x, i)),
    "scatter_value": (lambda x, i: x.scatter(0, i, 2.0), (x, i)),
    "scatter_reduce_sum": (lambda x, i: torch.zeros(4,6).scatter_reduce(0, i, x, "sum"), (x, i)),
    "index_select": (lambda x, j: x.index_select(0, j), (x, j)), "index_add": (lambda x, j: x.index_add(0, j, x[:3]), (x, j)),
    "rms_norm": (lambda x, w: F.rms_norm(x, (6,), w), (x, w)), "add_": (lambda x: x.clone().add_(1).mul_(2), (x,)),
    "split": (lambda x: x.split(2, 1)[1] * 2, (x,)), "chunk": (lambda x: x.chunk(3, 1)[2] * 2, (x,)), "unbind": (lambda x: x.unbind(0)[1] * 2, (x,)),
    "addmm": (lambda x: torch.addmm(x[:, :4], x, x.t()[:, :4]), (x,)), "baddbmm": (lambda b: torch.baddbmm(b[:, :, :4], b[:, :, :], b.transpose(1, 2)[:, :, :4]), (b3,)),
    "celu": (lambda x: F.celu(x, 0.5), (x,)), "sinc": (lambda x: torch.sinc(x), (x,)), "selu": (lambda x: F.selu(x), (x,)),
    "elu2": (lambda x: F.elu(x, 2.0), (x,)), "logit": (lambda x: torch.logit(x.sigmoid()), (x,)), "mul_in_enc": (lambda x: x * 0.5, (x,)),
    "softsign": (lambda x: F.softsign(x), (x,)), "hardshrink": (lambda x: F.hardshrink(x), (x,)), "softshrink": (lambda x: F.softshrink(x), (x,)),
    "tanhshrink": (lambda x: F.tanhshrink(x), (x,)), "relu6": (lambda x: F.relu6(x), (x,)), "logsigmoid": (lambda x: F.logsigmoid(x), (x,)),
    "glu": (lambda x: F.glu(x), (x,)), "prelu": (lambda x: F.prelu(x, torch.tensor([0.2])), (x,)), "rrelu_eval": (lambda x: F.rrelu(x), (x,)),
    "flip": (lambda x: x.flip(1), (x,)), "roll": (lambda x: x.roll(1, 1), (x,)), "sort": (lambda x: x.sort(1)[0], (x,)), "topk": (lambda x: x.topk(2, 1)[0], (x,)),
    "any": (lambda x: (x > 0).any(1), (x,)), "all": (lambda x: (x > 0).all(), (x,)), "tril": (lambda x: x.tril(), (x,)),
    "addmm_ab": (lambda x: torch.addmm(x[:, :4], x, x.t()[:, :4], beta=0.5, alpha=2.0), (x,)),
    "baddbmm_ab": (lambda b: torch.baddbmm(b[:, :, :4], b, b.transpose(1, 2)[:, :, :4], beta=0.0, alpha=0.5), (b3,)),
    "baddbmm_bcast": (lambda b: torch.baddbmm(b[0, :, :4], b, b.transpose(1, 2)[:, :, :4]), (b3,)),
    "logit_eps": (lambda x: torch.logit(x.sigmoid(), eps=0.1), (x,)),
    "cross_entropy": (lambda x, i: F.cross_entropy(x, i[:, 0].clamp(0, 5)), (x, i)),
}


def main(names):
    counts = {"native": 0, "partial": 0, "fallback": 0, "error": 0}
    print("| case | result | native share | ops left to PyTorch |")
    print("|---|---|---|---|")
    for name in names:
        fn, args = CASES[name]
        torch._dynamo.reset()
        try:
            with torch.no_grad():
                report = torchburn.explain(fn, *args)
                got = torch.compile(fn, backend="torchburn")(*args)
            assert torch.allclose(got.float(), fn(*args).float(), atol=1e-5, equal_nan=True), "wrong values"
            share = report.native_share
            kind = "native" if share == 1.0 and not report.fallback_ops else ("partial" if share > 0 else "fallback")
            left = ", ".join(sorted({k.replace("aten.", "") for k in report.fallback_ops}))
            print(f"| {name} | {kind} | {100 * share:.0f} % | {left} |")
        except Exception as error:  # noqa: BLE001 - a broken case is reported, not fatal
            kind = "error"
            print(f"| {name} | error | | {type(error).__name__}: {str(error)[:80]} |")
        counts[kind] += 1
    print(f"\n{len(names)} cases: " + ", ".join(f"{v} {k}" for k, v in counts.items()))


if __name__ == "__main__":
    main(sys.argv[1:] or list(CASES))
