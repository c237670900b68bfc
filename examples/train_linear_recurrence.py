"""Train a small linear-recurrence model (the recurrent core of a state-space model) with
scangen.torch, and check its gradients against torch's own loop over time.

The model reads inputs u of shape (batch, time, features). Per step and state channel it
makes a gate a = sigmoid(u W_a + c_a), in (0, 1), and a drive b = u W_b + c_b. The state
follows h[t] = a[t] * h[t-1] + b[t] along time, from h[-1] = 0. The output is y = h w + c.

scangen.torch.linear_recurrence computes h for the whole sequence at once: one scan of the
affine maps forward. The backward pass is one reverse scan: the gradient with respect to h
runs back through the same recurrence, on the multipliers shifted one step, and the same
scan writes the gradients of a and b (scangen.linear_recurrence_gradients). The model learns
to imitate a teacher of the same form with fixed weights.

Run on a machine with an NVIDIA GPU, PyCUDA and torch:  python examples/train_linear_recurrence.py
"""
import sys

import scangen

try:
    # Device 0's primary context: the one torch uses, so its tensors go straight in.
    scangen.current_context()
except scangen.GPUUnavailableError as err:  # no PyCUDA or no GPU: say so in one line
    sys.exit(f"this example runs on an NVIDIA GPU: {err}")
try:
    import torch
except ImportError:
    sys.exit("this example needs torch with CUDA: pip install torch")
import scangen.torch as differentiable  # noqa: E402 (after the checks)


class Recurrent(torch.nn.Module):
    """Gate and drive from the inputs, a linear recurrence over time, a linear readout."""

    def __init__(self, features: int, states: int):
        super().__init__()
        self.gate = torch.nn.Linear(features, states)
        self.drive = torch.nn.Linear(features, states)
        self.readout = torch.nn.Linear(states, 1)

    def forward(self, u, recurrence):
        h = recurrence(torch.sigmoid(self.gate(u)), self.drive(u))
        return self.readout(h).squeeze(-1)


def parallel(a, b):
    """h along time (dim 1) with scangen's scan."""
    return differentiable.linear_recurrence(a, b, dim=1)


def sequential(a, b):
    """The same recurrence one step at a time, as torch alone runs it."""
    h, states = torch.zeros_like(b[:, 0]), []
    for t in range(b.shape[1]):
        h = a[:, t] * h + b[:, t]
        states.append(h)
    return torch.stack(states, dim=1)


def gradients(model, u, target, recurrence):
    """Each parameter's gradient of the mean squared error."""
    model.zero_grad()
    torch.nn.functional.mse_loss(model(u, recurrence), target).backward()
    return [p.grad.clone() for p in model.parameters()]


def main(steps=300, batch=16, time=512, features=8, states=32, seed=0):
    torch.manual_seed(seed)
    device = torch.device("cuda")
    teacher = Recurrent(features, states).to(device)
    student = Recurrent(features, states).to(device)

    def batch_of_data():
        u = torch.randn(batch, time, features, device=device)
        with torch.no_grad():
            return u, teacher(u, parallel)

    # The gradients of one batch in float64, through scangen and through the loop.
    u, target = batch_of_data()
    student64 = Recurrent(features, states).to(device, torch.float64)
    student64.load_state_dict(student.state_dict())
    ours, loops = (gradients(student64, u.double(), target.double(), recurrence)
                   for recurrence in (parallel, sequential))
    for (name, _), mine, theirs in zip(student64.named_parameters(), ours, loops):
        torch.testing.assert_close(mine, theirs, rtol=1e-9, atol=1e-12,
                                   msg=lambda m, name=name: f"gradient of {name}: {m}")
    print("OK: gradients match torch's loop over time (float64)")

    optimizer = torch.optim.Adam(student.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        u, target = batch_of_data()
        loss = torch.nn.functional.mse_loss(student(u, parallel), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {loss.item():.5f}")
    return losses


if __name__ == "__main__":
    main()
