"""A dtrain model description (docs/MODELS.md) as a PyTorch nn.Module: the
reference the C compiler (src/model/desc.c) is checked against, and the module
a user loads dtrain's weights into (load_state_dict, the same tensor names).

    m = DescModel(json.load(open("models/llama.json")), overrides={"n_layer": 2})
    logits = m(tokens)          # (B, T, V); images/features (B, ...) likewise
    loss = m.loss(out, targets)

Expressions in sizes and names are evaluated as dtrain does (C integer
division, float32 for floats is not needed here: only shapes are computed).
Needs Debian's python3-torch (/usr/bin/python3).
"""
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- the expression language (src/model/expr.c) ----------------------------------

_TOK = re.compile(r"\s*(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\.\d+|\d+|'[^']*'|[A-Za-z_]\w*|==|!=|<=|>=|&&|\|\||[-+*/%()<>?:!\[\],])")


class _Expr:
    def __init__(self, src, env):
        self.toks, self.i, self.env = [], 0, env
        pos = 0
        while pos < len(src):
            m = _TOK.match(src, pos)
            if not m:
                if src[pos:].strip() == "":
                    break
                raise ValueError(f"expression '{src}': unexpected character")
            self.toks.append(m.group(1))
            pos = m.end()

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def eat(self, t):
        if self.peek() == t:
            self.i += 1
            return True
        return False

    def cond(self):
        c = self.or_()
        if not self.eat("?"):
            return c
        a = self.cond()
        assert self.eat(":")
        b = self.cond()
        return a if c else b

    def or_(self):
        v = self.and_()
        while self.eat("||"):
            v = int(bool(v) or bool(self.and_()))
        return v

    def and_(self):
        v = self.cmp()
        while self.eat("&&"):
            w = self.cmp()
            v = int(bool(v) and bool(w))
        return v

    def cmp(self):
        a = self.sum()
        for op in ("==", "!=", "<=", ">=", "<", ">"):
            if self.eat(op):
                b = self.sum()
                return int({"==": a == b, "!=": a != b, "<=": a <= b, ">=": a >= b, "<": a < b, ">": a > b}[op])
        return a

    def sum(self):
        v = self.prod()
        while self.peek() in ("+", "-"):
            op = self.toks[self.i]
            self.i += 1
            w = self.prod()
            v = v + w if op == "+" else v - w
        return v

    def prod(self):
        v = self.unary()
        while self.peek() in ("*", "/", "%"):
            op = self.toks[self.i]
            self.i += 1
            w = self.unary()
            if op == "*":
                v = v * w
            elif op == "%":
                v = int(math.fmod(v, w))
            elif isinstance(v, int) and isinstance(w, int):
                v = int(v / w) if abs(v) < 2**52 else (abs(v) // abs(w)) * (1 if (v < 0) == (w < 0) else -1)
            else:
                v = v / w
        return v

    def unary(self):
        if self.eat("-"):
            return -self.unary()
        if self.eat("!"):
            return int(not self.unary())
        v = self.atom()
        if self.eat("["):
            k = self.cond()
            assert self.eat("]")
            v = v[k]
        return v

    def atom(self):
        t = self.toks[self.i]
        self.i += 1
        if t == "(":
            v = self.cond()
            assert self.eat(")")
            return v
        if t.startswith("'"):
            return t[1:-1]
        if t[0].isdigit() or t[0] == ".":
            return float(t) if any(c in t for c in ".eE") else int(t)
        if self.eat("("):
            a = self.cond()
            assert self.eat(")")
            return {"sqrt": math.sqrt, "len": len, "int": int, "float": float}[t](a)
        return self.env[t]


def evaluate(v, env):
    """A description value: numbers as they are, strings as expressions."""
    if isinstance(v, str):
        e = _Expr(v, env)
        r = e.cond()
        return r
    return v


def template(s, env):
    return re.sub(r"\{([^}]*)\}", lambda m: str(evaluate(m.group(1), env)), s)


# ---- the modules -----------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(c)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, c, f):
        super().__init__()
        self.gate_proj = nn.Linear(c, f, bias=False)
        self.up_proj = nn.Linear(c, f, bias=False)
        self.down_proj = nn.Linear(f, c, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rope(x, theta):
    """Hugging Face LLaMA's rotate_half on (B, H, T, HS), inv_freq in float32."""
    T, HS = x.shape[-2], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.float32) / HS))
    f = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    emb = torch.cat((f, f), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : HS // 2], x[..., HS // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def attention(qkv, nh, nkv, use_rope, theta):
    B, T, W = qkv.shape
    hs = W // (nh + 2 * nkv)
    q = qkv[..., : nh * hs].view(B, T, nh, hs).transpose(1, 2)
    k = qkv[..., nh * hs: (nh + nkv) * hs].view(B, T, nkv, hs).transpose(1, 2)
    v = qkv[..., (nh + nkv) * hs:].view(B, T, nkv, hs).transpose(1, 2)
    if use_rope:
        q, k = rope(q, theta), rope(k, theta)
    k = k.repeat_interleave(nh // nkv, dim=1)
    v = v.repeat_interleave(nh // nkv, dim=1)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    return (att @ v).transpose(1, 2).reshape(B, T, nh * hs)


class DescModel(nn.Module):
    def __init__(self, desc, overrides=None):
        super().__init__()
        self.env = dict(desc.get("vars", {}))
        self.env.update(overrides or {})
        inp = desc["input"]
        if "tokens" in inp:
            shape, self.tokens = (evaluate(inp["tokens"], self.env),), True
        elif "features" in inp:
            shape, self.tokens = (evaluate(inp["features"], self.env),), False
        else:
            shape, self.tokens = tuple(evaluate(v, self.env) for v in inp["image"]), False
        self.in_shape = shape
        self.loss_kind = desc["loss"]
        self.program = []
        for item in desc["layers"]:
            shape = self._build(item, "", shape, self.program, self.env)

    def _module(self, path, mod):
        parent = self
        parts = path.split(".")
        for p in parts[:-1]:
            if not hasattr(parent, p):
                parent.add_module(p, nn.Module())
            parent = getattr(parent, p)
        parent.add_module(parts[-1], mod)
        return mod

    def _find(self, path):
        obj = self
        for p in path.split("."):
            obj = getattr(obj, p)
        return obj

    def _build(self, d, prefix, shape, prog, env):
        t = d["type"]
        ev = lambda k, default=None: evaluate(d.get(k, default), env)  # noqa: E731
        name = template(d["name"], env) if "name" in d else ""
        full = ".".join(x for x in (prefix, name) if x)
        if t == "repeat":
            for i in range(ev("count")):
                e = dict(env, i=i)
                base = ".".join(x for x in (prefix, template(d.get("name", ""), e)) if x)
                pre = f"{base}.{i}" if d.get("name") else base
                sub = []
                for c in d["layers"]:
                    shape = self._build(c, pre, shape, sub, e)
                prog.append(("seq", sub))
            return shape
        if t in ("sequential", "residual"):
            sub = []
            s = shape
            for c in d["layers"]:
                s = self._build(c, full or prefix, s, sub, env)
            prog.append((t, sub))
            return s
        last = shape[-1]
        if t == "linear":
            out = ev("out")
            bias = d.get("bias", True)
            if "tie" in d:
                prog.append(("tied", template(d["tie"], env), bias and self._module(full, nn.Module()), d.get("activation")))
                if bias:
                    self._find(full).register_parameter("bias", nn.Parameter(torch.zeros(out)))
            else:
                prog.append(("linear", self._module(full, nn.Linear(last, out, bias=bias)), d.get("activation")))
            return shape[:-1] + (out,)
        if t == "conv2d":
            out, k = ev("out"), ev("kernel")
            st, pad = ev("stride", 1), ev("pad", 0)
            prog.append(("conv", self._module(full, nn.Conv2d(shape[0], out, k, st, pad, bias=d.get("bias", True))),
                         d.get("activation")))
            return (out, (shape[1] + 2 * pad - k) // st + 1, (shape[2] + 2 * pad - k) // st + 1)
        if t == "maxpool2d":
            prog.append(("fn", lambda x: F.max_pool2d(x, 2, 2)))
            return (shape[0], shape[1] // 2, shape[2] // 2)
        if t == "avgpool2d":
            k = ev("kernel")
            st, pad = ev("stride", k), ev("pad", 0)
            prog.append(("fn", lambda x, k=k, st=st, pad=pad: F.avg_pool2d(x, k, st, pad, count_include_pad=True)))
            return (shape[0], (shape[1] + 2 * pad - k) // st + 1, (shape[2] + 2 * pad - k) // st + 1)
        if t == "global_avgpool":
            prog.append(("fn", lambda x: x.mean(dim=(2, 3))))
            return (shape[0],)
        if t == "flatten":
            prog.append(("fn", lambda x: x.flatten(1)))
            return (math.prod(shape),)
        acts = {"relu": F.relu, "gelu": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "tanh": torch.tanh}
        if t in acts:
            prog.append(("fn", acts[t]))
            return shape
        if t == "dropout":
            prog.append(("fn", lambda x: x))  # fixtures run without dropout (p = 0)
            return shape
        if t == "layernorm":
            prog.append(("mod", self._module(full, nn.LayerNorm(last, eps=1e-5))))
            return shape
        if t == "rmsnorm":
            prog.append(("mod", self._module(full, RMSNorm(last, ev("eps", 1e-6)))))
            return shape
        if t in ("batchnorm1d", "batchnorm2d"):
            cls = nn.BatchNorm2d if t == "batchnorm2d" else nn.BatchNorm1d
            prog.append(("mod", self._module(full, cls(shape[0], eps=ev("eps", 1e-5), momentum=ev("momentum", 0.1)))))
            return shape
        if t == "embedding":
            prog.append(("embed", self._module(full, nn.Embedding(ev("num"), ev("dim")))))
            return shape + (ev("dim"),)
        if t == "pos_embedding":
            prog.append(("pos", self._module(full, nn.Embedding(shape[0], shape[1]))))
            return shape
        if t == "attention":
            nh = ev("heads")
            nkv = ev("kv_heads", nh)
            prog.append(("fn", lambda x, nh=nh, nkv=nkv, r=d.get("rope", False), th=ev("rope_theta", 10000.0):
                         attention(x, nh, nkv, r, th)))
            return (shape[0], shape[1] * nh // (nh + 2 * nkv))
        if t == "swiglu":
            prog.append(("mod", self._module(full, SwiGLU(last, ev("hidden")))))
            return shape
        raise ValueError(f"unknown layer type {t}")

    def _run(self, prog, x):
        for op in prog:
            kind = op[0]
            if kind == "seq":
                x = self._run(op[1], x)
            elif kind == "sequential":
                x = self._run(op[1], x)
            elif kind == "residual":
                x = x + self._run(op[1], x)
            elif kind in ("linear", "conv"):
                x = op[1](x)
                if op[2] == "relu":
                    x = F.relu(x)
            elif kind == "tied":
                w = self._find(op[1])
                x = F.linear(x, w, op[2].bias if op[2] else None)
                if op[3] == "relu":
                    x = F.relu(x)
            elif kind in ("mod", "embed"):
                x = op[1](x)
            elif kind == "pos":
                x = x + op[1].weight[None]
            else:
                x = op[1](x)
        return x

    def forward(self, x):
        if not self.tokens:
            x = x.reshape((x.shape[0],) + self.in_shape)
        return self._run(self.program, x)

    def loss(self, out, targets):
        if self.loss_kind == "mse":
            return F.mse_loss(out.reshape(out.shape[0], -1), targets.reshape(out.shape[0], -1))
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1))
