"""python -m torchburn.bench compile --resnet: ResNet-18 and ResNet-50 (random weights, eval mode,
224x224, batch 1 and 8) run by PyTorch eager, ``torch.compile(backend="inductor")``,
``torch.compile(backend="torchburn")`` and the same with ``options={"freeze_weights": True}``, medians of interleaved blocks (as the compile bench), with
the ratios eager/torchburn and inductor/torchburn (> 1: torchburn faster).

The ResNets are defined here (torchvision is not a dependency): the standard layouts — 7x7/2 stem
conv + BN + ReLU + 3x3/2 max-pool, four stages of BasicBlocks [2, 2, 2, 2] (ResNet-18) or
Bottlenecks [3, 4, 6, 3] with expansion 4 (ResNet-50), 1x1/2 projection shortcuts, global average
pool, fully connected 1000.
"""
from __future__ import annotations

import argparse
import json
import os
import warnings
from typing import Any

from . import format_time, machine_facts, print_table


def build_resnet(torch: Any, depth: int):
    nn = torch.nn

    class Basic(nn.Module):
        expansion = 1

        def __init__(self, cin, planes, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.down = None
            if stride != 1 or cin != planes:
                self.down = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

        def forward(self, x):
            identity = x if self.down is None else self.down(x)
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + identity)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, planes, stride):
            super().__init__()
            width = planes * 4
            self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, width, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(width)
            self.down = None
            if stride != 1 or cin != width:
                self.down = nn.Sequential(nn.Conv2d(cin, width, 1, stride, bias=False), nn.BatchNorm2d(width))

        def forward(self, x):
            identity = x if self.down is None else self.down(x)
            out = torch.relu(self.bn1(self.conv1(x)))
            out = torch.relu(self.bn2(self.conv2(out)))
            return torch.relu(self.bn3(self.conv3(out)) + identity)

    block, counts = (Basic, [2, 2, 2, 2]) if depth == 18 else (Bottleneck, [3, 4, 6, 3])

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), counts)):
                for i in range(count):
                    layers.append(block(cin, planes, 2 if i == 0 and stage > 0 else 1))
                    cin = planes * block.expansion
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, 1000)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))

    model = ResNet()
    g = torch.Generator().manual_seed(depth)
    with torch.no_grad():  # random but non-trivial BN statistics, so folding them is exercised
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchburn.bench compile --resnet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resnet", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cases", default="18:1,18:8,50:1,50:8", help="depth:batch pairs, comma-separated")
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per implementation and case")
    parser.add_argument("--no-inductor", action="store_true", help="skip inductor (it compiles slowly)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv or [])

    os.environ.setdefault("TORCHBURN_QUIET", "1")
    import torch

    import torchburn
    from torchburn.backend import _share_pytorch_threads, torchburn_backend

    from .compile import interleaved_medians

    torchburn.register()
    _share_pytorch_threads()  # what the first compile does, so the facts line is right
    torch.set_num_threads(torchburn.get_num_threads())
    warnings.filterwarnings("ignore")
    rows, records = [], []
    for case in args.cases.split(","):
        depth, batch = (int(part) for part in case.split(":"))
        model = build_resnet(torch, depth)
        x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            expected = model(x)
            torch._dynamo.reset()
            torchburn.cache_clear()
            burn = torch.compile(model, backend=torchburn_backend)
            torch.testing.assert_close(burn(x), expected, rtol=1e-3, atol=1e-3)  # never time a wrong answer
            frozen = torch.compile(model, backend=torchburn_backend, options={"freeze_weights": True})
            torch.testing.assert_close(frozen(x), expected, rtol=1e-3, atol=1e-3)
            fns = {"eager": model, "torchburn": burn, "frozen": frozen}
            if not args.no_inductor:
                inductor = torch.compile(model, backend="inductor")
                torch.testing.assert_close(inductor(x), expected, rtol=1e-3, atol=1e-3)
                fns["inductor"] = inductor
            medians = interleaved_medians(fns, (x,), args.seconds, rounds=4)
        t = {name: value[1] for name, value in medians.items()}  # quietest block
        eager_ratio = t["eager"] / t["torchburn"]
        inductor_ratio = t["inductor"] / t["torchburn"] if "inductor" in t else float("nan")
        name = f"ResNet-{depth} batch {batch} 224x224"
        frozen_ratio = t["eager"] / t["frozen"]
        rows.append([name, format_time(t["eager"]), format_time(t["inductor"]) if "inductor" in t else "-",
                     format_time(t["torchburn"]), f"{eager_ratio:.2f}x",
                     f"{inductor_ratio:.2f}x" if "inductor" in t else "-", format_time(t["frozen"]),
                     f"{frozen_ratio:.2f}x",
                     f"{t['inductor'] / t['frozen']:.2f}x" if "inductor" in t else "-"])
        records.append({"model": name, "seconds": t, "vs_eager": eager_ratio, "vs_inductor": inductor_ratio,
                        "frozen_vs_eager": frozen_ratio})
    if args.json:
        print(json.dumps({"machine": machine_facts(), "results": records}, indent=2))
        return 0
    print(machine_facts())
    print("steady-state latency (median of the quietest block); ratio = their time / torchburn time\n")
    print("frozen: torch.compile(..., options={\"freeze_weights\": True}) (packed weights kept between calls)\n")
    print_table(["model", "eager", "inductor", "torchburn", "vs eager", "vs inductor", "frozen", "frozen vs eager",
                 "frozen vs inductor"], rows)
    return 0
