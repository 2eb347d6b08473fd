"""A character-level LSTM language model (embedding, 2-layer LSTM, linear head), AdamW, clipping."""
from _backend import STEPS, framework, load_initial_state, report, save_state

import numpy as np

torch = framework()
nn = torch.nn

text = "the quick brown fox jumps over the lazy dog and keeps running through the quiet night " * 4
vocab = sorted(set(text))
ids = torch.tensor([vocab.index(c) for c in text])


class CharLM(nn.Module):
    def __init__(self, vocab_size, hidden=32):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, 16)
        self.lstm = nn.LSTM(16, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, x):
        out, _ = self.lstm(self.embed(x))
        return self.head(out)


model = CharLM(len(vocab))
if __import__("os").environ.get("TB_PROGRAM_SAVE"):
    save_state(model, __import__("os").environ["TB_PROGRAM_SAVE"])
    raise SystemExit
load_initial_state(torch, model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
seq = 24
losses = []
for step in range(STEPS):
    start = (step * 7) % (len(text) - seq - 1)
    x = ids[start:start + seq].reshape(1, seq)
    y = ids[start + 1:start + seq + 1].reshape(1, seq)
    logits = model(x)
    loss = nn.functional.cross_entropy(logits.reshape(-1, len(vocab)), y.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())
report(losses)
