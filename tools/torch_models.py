"""The reference models in PyTorch, defined once: the modules dtrain's C
builders (src/model/mlp.c, cnn.c, gpt.c) describe, with the same tensor names
and layouts (nn.Linear weight is (out, in); the GPT follows nanoGPT's names),
so a dtrain weights file loads into them with load_state_dict(strict=True).

Used by tools/gen_fixtures.py (reference values), tools/torch_eval.py (exported
weights evaluated in PyTorch) and bench/torch_bench.py (the PyTorch side of the
speed benchmark). Modules are built in PyTorch's default initialisation; the
callers set their own weights where they need others. Needs Debian's
python3-torch (/usr/bin/python3).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """in_dim -> hidden... (ReLU) -> n_classes; tensors fc1, fc2, ..."""

    def __init__(self, in_dim, hidden, n_classes):
        super().__init__()
        dims = [in_dim] + list(hidden) + [n_classes]
        self.n = len(dims) - 1
        for i in range(self.n):
            setattr(self, f"fc{i + 1}", nn.Linear(dims[i], dims[i + 1]))

    def forward(self, x):
        x = x.flatten(1)  # images (B, 1, 28, 28) as well as (B, in_dim)
        for i in range(self.n):
            x = getattr(self, f"fc{i + 1}")(x)
            if i < self.n - 1:
                x = F.relu(x)
        return x


class CNN(nn.Module):
    """1x28x28 -> conv5x5(32) relu pool2 -> conv5x5(64) relu pool2 -> fc 1024 relu -> 10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 1024)
        self.fc2 = nn.Linear(1024, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def causal_attention(qkv, B, T, C, NH):
    """nanoGPT's CausalSelfAttention between c_attn and c_proj, the explicit
    masked softmax (torch 1.13 has no scaled_dot_product_attention); returns
    (y, att). The mask is built here, not kept as a buffer, so it never shows
    up in a state_dict."""
    HS = C // NH
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, HS).transpose(1, 2)
    k = k.view(B, T, NH, HS).transpose(1, 2)
    v = v.view(B, T, NH, HS).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
    return y, att


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.shape
        y, _ = causal_attention(self.c_attn(x), B, T, C, self.n_head)
        return self.c_proj(y)


class GPTMLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = GPTMLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT (dropout 0, biases on, lm_head tied to wte); forward gives logits (B, T, V)."""

    def __init__(self, n_layer=4, n_head=4, n_embd=256, block_size=128, vocab_size=256):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd, eps=1e-5),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def mean_xent(logits, targets):
    """Mean cross-entropy over every position: logits (..., V), targets (...)."""
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
