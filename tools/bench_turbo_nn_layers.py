"""Ad-hoc timing of turbo_torch ConvTranspose2d and interpolate against torch (medians of 7, forward and
forward+backward). Run: flock /tmp/tb_build.lock python tools/bench_turbo_nn_layers.py"""
import time, statistics, torch, turbo_torch as tt, numpy as np, os, platform
from turbo_torch import nn as tnn
def med(fn, n=7):
    fn(); ts=[]
    for _ in range(n):
        t=time.perf_counter(); fn(); ts.append(time.perf_counter()-t)
    return statistics.median(ts)*1e3
def to_tt(x): return tt.from_numpy(x.detach().numpy().copy()) if hasattr(tt,'from_numpy') else tt.tensor(x.tolist())
print("CPU:", [l.split(':')[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')][0], "cores", os.cpu_count(), "torch threads", torch.get_num_threads())
rows=[]
torch.manual_seed(0)
cases=[("ConvTranspose2d 64->32 k4 s2 p1, x[8,64,32,32]", lambda m: m.ConvTranspose2d(64,32,4,2,1), (8,64,32,32), None),
       ("interpolate bilinear x2, x[8,64,64,64]", None, (8,64,64,64), dict(scale_factor=2, mode="bilinear")),
       ("interpolate nearest x2, x[8,64,64,64]", None, (8,64,64,64), dict(scale_factor=2, mode="nearest"))]
for name, build, shape, kw in cases:
    x = torch.randn(*shape); xo = to_tt(x)
    if build:
        r = build(torch.nn); o = build(tnn); o.load_state_dict({k: to_tt(v) for k,v in r.state_dict().items()})
        f_t, f_o = (lambda: r(x)), (lambda: o(xo))
    else:
        f_t = lambda: torch.nn.functional.interpolate(x, **kw); f_o = lambda: tnn.functional.interpolate(xo, **kw)
    xg = x.clone().requires_grad_(True); xog = to_tt(x).requires_grad_(True)
    def b_t():
        y = (r(xg) if build else torch.nn.functional.interpolate(xg, **kw)); y.sum().backward()
    def b_o():
        y = (o(xog) if build else tnn.functional.interpolate(xog, **kw)); y.sum().backward()
    a, b = med(f_t), med(f_o); c, d = med(b_t), med(b_o)
    rows.append((name, a, b, c, d))
print("| case | torch fwd ms | turbo fwd ms | ratio | torch fwd+bwd ms | turbo fwd+bwd ms | ratio |")
print("|---|---|---|---|---|---|---|")
for name,a,b,c,d in rows:
    print(f"| {name} | {a:.2f} | {b:.2f} | {b/a:.2f} | {c:.2f} | {d:.2f} | {d/c:.2f} |")
