"""A 2-layer Transformer encoder classifier over token sequences (mean pooling), Adam."""
from _backend import STEPS, framework, load_initial_state, report, save_state

import numpy as np

torch = framework()
nn = torch.nn

rng = np.random.default_rng(2)
tokens = torch.from_numpy(rng.integers(0, 50, (16, 12)).astype(np.int64))
labels = torch.from_numpy(rng.integers(0, 3, 16).astype(np.int64))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(1))


model = Classifier()
if __import__("os").environ.get("TB_PROGRAM_SAVE"):
    save_state(model, __import__("os").environ["TB_PROGRAM_SAVE"])
    raise SystemExit
load_initial_state(torch, model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
losses = []
for step in range(STEPS):
    batch = slice((step * 4) % 16, (step * 4) % 16 + 4)
    loss = nn.functional.cross_entropy(model(tokens[batch]), labels[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
report(losses)
