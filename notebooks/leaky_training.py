"""A small training loop with the classic leak: every step's loss is kept for logging together
with its autograd graph, so each step's activations stay alive.

    python -m torchleak run notebooks/leaky_training.py
"""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_history = []

for _ in range(12):
    x = torch.randn(256, 512)
    y = torch.randint(0, 10, (256,))
    hidden = model[1](model[0](x))  # activations saved for backward
    loss = torch.nn.functional.cross_entropy(model[2](hidden), y)
    optimizer.zero_grad()
    loss.backward(retain_graph=True)
    optimizer.step()  # each optimizer.step() ends an iteration for torchleak
    loss_history.append(loss)  # the bug: keeps the graph; use loss.item()

print(f"trained {len(loss_history)} steps, last loss {loss_history[-1].item():.3f}")
