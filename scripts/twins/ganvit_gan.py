"""The Python twin of recipes/ganvit's conditional GAN (make bench-recipes).

The generator and the projection discriminator as recipes/ganvit builds
them (gan.go; its gan_test.go checks the iteration against a Python loop
of the same shape), with its state-dict names under "generator." and
"discriminator.". GroupNorm casts its input to its parameters' dtype, as
the recipe's does: libtorch 1.13's CPU autocast hands group_norm a
bfloat16 input with float32 parameters, which it refuses.

step() is one iteration of ganvit.GAN.Step: z ~ N(0, 1); the
discriminator's 0.5 (BCE(D(x), 1) + BCE(D(G(z)), 0)) with G under no_grad,
clipping, Adam; the generator's BCE(D(G(z)), 1) with D's parameters
frozen, clipping, Adam; both optimizers' gradients set to None.
backward() is the check's half: both losses and their gradients at the
current weights with the file's z, no optimizer step.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class GroupNorm(nn.GroupNorm):
    def forward(self, x):
        if x.dtype != self.weight.dtype:
            x = x.to(self.weight.dtype)
        return super().forward(x)


def seed(c):
    f = 1 << c["ups"]
    return (c["mels"] + f - 1) // f, (c["frames"] + f - 1) // f


class Generator(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h, w = seed(c)
        self.label_emb = nn.Embedding(c["classes"], c["embed"])
        self.fc = nn.Linear(c["latent"] + c["cond_dim"] + c["embed"], c["gen_channels"] * h * w)
        layers, ch = [], c["gen_channels"]
        for _ in range(c["ups"]):
            layers += [nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1), GroupNorm(min(8, ch // 2), ch // 2), nn.ReLU()]
            ch //= 2
        layers += [nn.Conv2d(ch, 1, 3, padding=1), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z, cond, genre):
        c = self.c
        h, w = seed(c)
        dt = self.fc.weight.dtype
        x = torch.cat([z.to(dt), cond.to(dt), self.label_emb(genre).to(dt)], 1)
        x = F.relu(self.fc(x)).reshape(z.size(0), c["gen_channels"], h, w)
        x = self.net(x)
        return x[:, :, :c["mels"], :c["frames"]]


class Discriminator(nn.Module):
    def __init__(self, c):
        super().__init__()
        layers, cin, ch = [], 1, c["disc_channels"]
        for i in range(c["ups"]):
            layers.append(nn.Conv2d(cin, ch, 4, 2, 1))
            if i > 0:
                layers.append(GroupNorm(min(8, ch), ch))
            layers.append(nn.LeakyReLU(0.2))
            cin, ch = ch, ch * 2
        self.net = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, 1)
        self.label_emb = nn.Embedding(c["classes"], cin)
        self.cond_proj = nn.Linear(c["cond_dim"], cin, bias=False)

    def forward(self, x, cond, genre):
        h = self.net(x).mean((2, 3))
        proj = self.label_emb(genre).to(h.dtype) + self.cond_proj(cond.to(h.dtype))
        return self.fc(h) + (h * proj).sum(1, keepdim=True)


def bce(logits, target):
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, target))


class Twin:
    def __init__(self, spec, data):
        c = spec["model"]
        self.c = c
        self.g, self.d = Generator(c), Discriminator(c)
        self.model = nn.ModuleDict({"generator": self.g, "discriminator": self.d})
        self.model.load_state_dict(data["model"], strict=True)
        self.model.train()
        b = data["batch"]
        self.x, self.cond, self.label, self.z = b["spec"], b["cond"], b["label"], b["z"]
        o = spec["optim"]
        self.clip = o["clip_norm"]
        mk = lambda m: torch.optim.Adam(m.parameters(), lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
        self.opt_g, self.opt_d = mk(self.g), mk(self.d)
        self.optimizers = [self.opt_g, self.opt_d]
        self.bf16 = spec["precision"] == "bf16"
        self.device_type = spec.get("device_type", "cpu")

    def autocast(self):
        return torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.bf16)

    def d_loss(self, z):
        with self.autocast():
            with torch.no_grad():
                fake = self.g(z, self.cond, self.label)
            loss = 0.5 * (bce(self.d(self.x, self.cond, self.label), 1) + bce(self.d(fake, self.cond, self.label), 0))
        return loss.float()

    def g_loss(self, z):
        for p in self.d.parameters():
            p.requires_grad_(False)
        with self.autocast():
            loss = bce(self.d(self.g(z, self.cond, self.label), self.cond, self.label), 1)
        return loss.float()

    def unfreeze(self):
        for p in self.d.parameters():
            p.requires_grad_(True)

    def backward(self):
        dl = self.d_loss(self.z)
        value = dl.item()
        dl.backward()
        gl = self.g_loss(self.z)
        value += gl.item()
        gl.backward()
        self.unfreeze()
        return value

    def step(self):
        z = torch.randn(self.x.size(0), self.c["latent"], device=self.x.device)
        dl = self.d_loss(z)
        dl.item()
        dl.backward()
        torch.nn.utils.clip_grad_norm_(self.d.parameters(), self.clip)
        self.opt_d.step()
        gl = self.g_loss(z)
        gl.item()
        gl.backward()
        self.unfreeze()
        torch.nn.utils.clip_grad_norm_(self.g.parameters(), self.clip)
        self.opt_g.step()
        self.opt_d.zero_grad(set_to_none=True)
        self.opt_g.zero_grad(set_to_none=True)


def build(spec, data):
    return Twin(spec, data)
