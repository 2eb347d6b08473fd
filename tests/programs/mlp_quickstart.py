"""The PyTorch quickstart: an MLP on FashionMNIST-shaped data (synthetic), DataLoader, SGD."""
from _backend import STEPS, framework, load_initial_state, report, save_state  # the import line of the program

import numpy as np

torch = framework()
nn = torch.nn
DataLoader, TensorDataset = torch.utils.data.DataLoader, torch.utils.data.TensorDataset

rng = np.random.default_rng(0)
images = torch.from_numpy(rng.standard_normal((256, 1, 28, 28)).astype(np.float32))
labels = torch.from_numpy(rng.integers(0, 10, 256).astype(np.int64))
loader = DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=False)


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(nn.Linear(28 * 28, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                               nn.Linear(512, 10))

    def forward(self, x):
        return self.linear_relu_stack(self.flatten(x))


model = NeuralNetwork()
if __name__ == "__main__" and __import__("os").environ.get("TB_PROGRAM_SAVE"):
    save_state(model, __import__("os").environ["TB_PROGRAM_SAVE"])
    raise SystemExit
load_initial_state(torch, model)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
losses = []
while len(losses) < STEPS:
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if len(losses) == STEPS:
            break
report(losses)
