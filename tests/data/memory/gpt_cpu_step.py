"""One training step of a small GPT on CPU (Adam), captured with tracekit.capture and its allocation events.

Writes ``et_rank0.json`` and ``kineto_rank0.json`` under the directory given as the first argument.  The
model is the GPT of Radford et al. 2019 / Megatron-LM written in plain PyTorch, so that every tensor it keeps
for the backward is one of Korthikanti et al. 2022's inventory (tracekit/workloads/activations.py): pre-norm
layers (LayerNorm, fused QKV, softmax attention with dropout, output projection, dropout, residual;
LayerNorm, 4h GELU MLP, dropout, residual), learned positions, embedding dropout, a final LayerNorm and an
output layer tied to the word embedding, cross-entropy on the logits.  fp32; Adam; gradients kept between
steps (``zero_grad(set_to_none=False)``, as Megatron-LM's persistent gradient buffer); the first step warms
up (Adam allocates its state there) and the second is captured.

Shape (SHAPE below): 4 layers, hidden 256, 4 heads, sequence 256, vocabulary 1024, micro-batch 4.
"""

import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

SHAPE = {"layers": 4, "hidden": 256, "heads": 4, "seq": 256, "vocab": 1024, "batch": 4, "dropout": 0.1}


class Layer(nn.Module):
    def __init__(self, h, a, p):
        super().__init__()
        self.a, self.p = a, p
        self.ln1, self.qkv, self.proj = nn.LayerNorm(h), nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.ln2, self.fc1, self.fc2 = nn.LayerNorm(h), nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x, mask):
        b, t, h = x.shape
        d = h // self.a
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.a, d).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        probs = F.dropout(torch.softmax(scores.masked_fill(mask, float("-inf")), -1), self.p, self.training)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, h)
        x = x + F.dropout(self.proj(ctx), self.p, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, self.training)


class GPT(nn.Module):
    def __init__(self, layers, hidden, heads, seq, vocab, dropout):
        super().__init__()
        self.p = dropout
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.layers = nn.ModuleList(Layer(hidden, heads, dropout) for _ in range(layers))
        self.lnf = nn.LayerNorm(hidden)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, idx, target):
        x = F.dropout(self.wte(idx) + self.wpe.weight[: idx.shape[1]], self.p, self.training)
        for layer in self.layers:
            x = layer(x, self.mask)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), target.view(-1))


def main(out_dir):
    from tracekit.capture import capture

    torch.manual_seed(0)
    torch.set_num_threads(1)
    s = SHAPE
    model = GPT(s["layers"], s["hidden"], s["heads"], s["seq"], s["vocab"], s["dropout"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    idx = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
    target = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))

    def step():
        model(idx, target).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    step()  # warm-up: Adam allocates its state
    with capture(out_dir) as cap:
        step()
    assert cap.complete


if __name__ == "__main__":
    main(sys.argv[1])
