"""Per-step profile of the grad-on CNN forward plan (bench shapes): min over 50 runs per step."""
import collections, torch, torch.nn as nn
import torchburn
from torchburn.backend.diagnostics import Recorder
torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    nn.Linear(64, 10)).eval()
x = torch.randn(8, 3, 64, 64)
compiled = torch.compile(model, backend="torchburn")
with Recorder() as rec:
    compiled(x).sum().backward()
for g in rec.graphs:
    for r in g.runners:
        plan = r.plan
        args = []
        for i in range(plan.num_inputs):
            dtype, shape, strides = plan.input_info(i)
            t = torch.empty_strided(shape, strides, dtype=getattr(torch, dtype) if isinstance(dtype, str) else dtype)
            t.copy_(torch.rand(shape)) if t.is_floating_point() else t.zero_()
            args.append(t)
        prof = plan.profile(tuple(args), 50)
        timing = sorted(plan.run_timing(tuple(args), 50))
        print(f"== {g.kind}: {plan.num_steps} steps, {plan.num_outputs} outputs, bare run median {timing[len(timing)//2]*1e3:.3f} ms")
        agg = collections.OrderedDict()
        for kernel, sec in prof:
            c, s = agg.get(kernel, (0, []))
            agg[kernel] = (c + 1, s + [sec])
        for k, (c, s) in agg.items():
            print(f"  {k:28s} x{c}: " + " + ".join(f"{v*1e6:.0f}" for v in s) + " us")
for g in rec.graphs:
    if g.kind == "forward":
        print(g.runners[0].plan.describe())
