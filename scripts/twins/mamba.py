"""The Python twin of recipes/mamba (make bench-recipes).

mamba-ssm's MambaLMHeadModel in plain PyTorch, the one copy: recipes/mamba's
tests read this file too (model_test.go's pyTwin): mamba-ssm's state-dict names, the LM
head tied to the embedding, and mamba-ssm's reference scan
(selective_scan_ref: a Python loop over positions, what mamba-ssm runs
without its CUDA kernels). The loss is the recipe's: next-token
cross-entropy with the training preset's label smoothing, mean over tokens.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def selective_scan_ref(u, delta, A, B, C, D, z):
    deltaA = torch.exp(torch.einsum('bdl,dn->bdln', delta, A))
    deltaB_u = torch.einsum('bdl,bnl,bdl->bdln', delta, B, u)
    x = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for i in range(u.shape[2]):
        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
        ys.append(torch.einsum('bdn,bn->bd', x, C[:, :, i]))
    y = torch.stack(ys, dim=2)
    out = y + u * D[:, None]
    return out * F.silu(z)


class Mamba(nn.Module):
    def __init__(self, d, n, expand, r, k):
        super().__init__()
        e = expand * d
        self.n, self.r = n, r
        self.in_proj = nn.Linear(d, 2 * e, bias=False)
        self.conv1d = nn.Conv1d(e, e, k, groups=e, padding=k - 1, bias=True)
        self.x_proj = nn.Linear(e, r + 2 * n, bias=False)
        self.dt_proj = nn.Linear(r, e, bias=True)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n + 1, dtype=torch.float32)).repeat(e, 1))
        self.D = nn.Parameter(torch.ones(e))
        self.out_proj = nn.Linear(e, d, bias=False)

    def forward(self, h):
        l = h.shape[1]
        xz = self.in_proj(h).transpose(1, 2)
        x, z = xz.chunk(2, dim=1)
        x = F.silu(self.conv1d(x)[..., :l])
        x_dbl = self.x_proj(x.transpose(1, 2))
        dt, B, C = torch.split(x_dbl, [self.r, self.n, self.n], dim=-1)
        dt = self.dt_proj.weight @ dt.transpose(1, 2)
        delta = F.softplus(dt + self.dt_proj.bias[:, None])
        A = -torch.exp(self.A_log.float())
        y = selective_scan_ref(x, delta, A, B.transpose(1, 2), C.transpose(1, 2), self.D.float(), z)
        return self.out_proj(y.transpose(1, 2))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.mixer = Mamba(c['d_model'], c['d_state'], c['expand'], c['dt_rank'], c['d_conv'])
        self.norm = RMSNorm(c['d_model'], c['norm_eps'])

    def forward(self, h, residual):
        residual = h + residual if residual is not None else h
        return self.mixer(self.norm(residual)), residual


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embedding = nn.Embedding(c['padded_vocab'], c['d_model'])
        self.layers = nn.ModuleList([Block(c) for _ in range(c['n_layers'])])
        self.norm_f = RMSNorm(c['d_model'], c['norm_eps'])

    def forward(self, ids):
        h, res = self.embedding(ids), None
        for layer in self.layers:
            h, res = layer(h, res)
        return self.norm_f(h + res)


class MambaLMHeadModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.backbone = Backbone(c)
        self.lm_head = nn.Linear(c['d_model'], c['padded_vocab'], bias=False)
        self.lm_head.weight = self.backbone.embedding.weight

    def forward(self, ids):
        return self.lm_head(self.backbone(ids))


class Twin:
    def __init__(self, spec, data):
        c = spec["model"]
        self.model = MambaLMHeadModel(c)
        self.model.load_state_dict(data["model"], strict=True)
        self.model.train()
        self.ls = c["label_smoothing"]
        self.x, self.y = data["batch"]["x"], data["batch"]["y"]

    def loss(self):
        logits = self.model(self.x)
        return F.cross_entropy(logits.flatten(0, 1).float(), self.y.flatten(), label_smoothing=self.ls)


def build(spec, data):
    return Twin(spec, data)
