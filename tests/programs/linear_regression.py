"""Linear regression with SGD + momentum and ReduceLROnPlateau."""
from _backend import STEPS, framework, load_initial_state, report, save_state

import numpy as np

torch = framework()
nn = torch.nn

rng = np.random.default_rng(3)
x = torch.from_numpy(rng.standard_normal((64, 5)).astype(np.float32))
true_w = torch.from_numpy(rng.standard_normal((5, 1)).astype(np.float32))
y = x @ true_w + 0.1 * torch.from_numpy(rng.standard_normal((64, 1)).astype(np.float32))
model = nn.Linear(5, 1)
if __import__("os").environ.get("TB_PROGRAM_SAVE"):
    save_state(model, __import__("os").environ["TB_PROGRAM_SAVE"])
    raise SystemExit
load_initial_state(torch, model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=2)
losses = []
for step in range(STEPS):
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step(loss.item())
    losses.append(loss.item())
report(losses)
