"""A small CNN with BatchNorm (training statistics) and Dropout (kept in eval mode), Adam."""
from _backend import STEPS, framework, load_initial_state, report, save_state

import numpy as np

torch = framework()
nn = torch.nn

rng = np.random.default_rng(1)
images = torch.from_numpy(rng.standard_normal((32, 1, 12, 12)).astype(np.float32))
labels = torch.from_numpy(rng.integers(0, 4, 32).astype(np.int64))

model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Dropout(0.3), nn.Linear(8, 4))
if __import__("os").environ.get("TB_PROGRAM_SAVE"):
    save_state(model, __import__("os").environ["TB_PROGRAM_SAVE"])
    raise SystemExit
load_initial_state(torch, model)
model.train()
model[9].eval()  # dropout off: its random stream is the framework's own
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
losses = []
for step in range(STEPS):
    batch = slice((step * 8) % 32, (step * 8) % 32 + 8)
    loss = nn.functional.cross_entropy(model(images[batch]), labels[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
report(losses)
