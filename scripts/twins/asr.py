"""The Python twin of recipes/asr's Conformer (make bench-recipes).

What a PyTorch user writes for the KonkaniVani conformer: torch.nn layers
(MultiheadAttention, TransformerDecoderLayer, Conv1d/2d, BatchNorm1d,
LayerNorm) with torchfit's parameter names, so it loads the weights
torchfit initialised. The loss is the recipe's: 0.3 CTC (mean, zero_infinity)
+ 0.7 label-smoothed cross entropy of the attention decoder.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BLANK, PAD, SOS, EOS = 0, 1, 2, 3


def conv_out(n):
    return 0 if n < 3 else (n - 3) // 2 + 1


def sinusoid(max_len, d):
    pos = torch.arange(0, max_len, 1, dtype=torch.float64).unsqueeze(1)
    div = (torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d)).exp()
    ang = pos * div
    return torch.stack([ang.sin(), ang.cos()], 2).reshape(max_len, d).float()


class PosEnc(nn.Module):
    def __init__(self, d, max_len):
        super().__init__()
        self.register_buffer("pe", sinusoid(max_len, d), persistent=False)

    def forward(self, x):
        return x + self.pe[: x.size(1)]


class ConvSubsampling(nn.Module):
    def __init__(self, mels, d):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU())
        self.out = nn.Linear(d * conv_out(conv_out(mels)), d)

    def forward(self, x):
        y = self.conv(x.unsqueeze(1))
        b, c, t, f = y.shape
        return self.out(y.transpose(1, 2).reshape(b, t, c * f))


class FeedForward(nn.Module):
    def __init__(self, d, ff, p):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.linear1 = nn.Linear(d, ff)
        self.linear2 = nn.Linear(ff, d)
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        h = self.dropout(F.silu(self.linear1(self.norm(x))))
        return self.dropout(self.linear2(h))


class ConvModule(nn.Module):
    def __init__(self, d, kernel, p):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pointwise_conv1 = nn.Conv1d(d, 2 * d, 1)
        self.depthwise_conv = nn.Conv1d(d, d, kernel, padding=(kernel - 1) // 2, groups=d)
        self.batch_norm = nn.BatchNorm1d(d)
        self.pointwise_conv2 = nn.Conv1d(d, d, 1)
        self.dropout = nn.Dropout(p)

    def forward(self, x, valid):
        h = F.glu(self.pointwise_conv1(self.norm(x).transpose(1, 2)), 1)
        if valid is not None:
            h = h * valid.transpose(1, 2)
        h = self.batch_norm(self.depthwise_conv(h))
        h = self.pointwise_conv2(F.silu(h))
        return self.dropout(h).transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, p = c["d_model"], c["dropout"]
        self.ff1 = FeedForward(d, c["ff_dim"], p)
        self.attn_norm = nn.LayerNorm(d)
        self.self_attn = nn.MultiheadAttention(d, c["heads"], dropout=p, batch_first=True)
        self.attn_dropout = nn.Dropout(p)
        self.conv_module = ConvModule(d, c["conv_kernel"], p)
        self.ff2 = FeedForward(d, c["ff_dim"], p)
        self.final_norm = nn.LayerNorm(d)

    def forward(self, x, pad_mask):
        valid = None if pad_mask is None else (~pad_mask).to(x.dtype).unsqueeze(-1)
        x = x + self.ff1(x) * 0.5
        h = self.attn_norm(x)
        a, _ = self.self_attn(h, h, h, key_padding_mask=pad_mask, need_weights=False)
        x = x + self.attn_dropout(a)
        x = x + self.conv_module(x, valid)
        x = x + self.ff2(x) * 0.5
        return self.final_norm(x)


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.d = c["d_model"]
        self.subsample = ConvSubsampling(c["mels"], self.d)
        self.pos_enc = PosEnc(self.d, c["max_len"])
        self.dropout = nn.Dropout(c["dropout"])
        self.layers = nn.ModuleList(ConformerBlock(c) for _ in range(c["encoder_layers"]))

    def forward(self, feats, out_lens):
        x = self.subsample(feats)
        t = x.size(1)
        x = self.dropout(self.pos_enc(x * math.sqrt(self.d)))
        mask = None
        if (out_lens < t).any():
            mask = torch.arange(t, device=x.device).unsqueeze(0) >= out_lens.unsqueeze(1)
        for layer in self.layers:
            x = layer(x, mask)
        return x


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.embed = nn.Embedding(c["vocab"], d, padding_idx=PAD)
        self.pos_enc = PosEnc(d, c["max_len"])
        self.dropout = nn.Dropout(c["dropout"])
        self.layers = nn.ModuleList(
            nn.TransformerDecoderLayer(d, c["heads"], c["decoder_ff_dim"], c["dropout"], activation="relu",
                                       layer_norm_eps=1e-5, batch_first=True, norm_first=True)
            for _ in range(c["decoder_layers"]))
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, c["vocab"])

    def forward(self, ys, memory, tgt_pad, mem_pad):
        x = self.dropout(self.pos_enc(self.embed(ys)))
        n = ys.size(1)
        causal = torch.ones(n, n, dtype=torch.bool, device=ys.device).triu(1)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=causal, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=mem_pad)
        return self.out(self.norm(x))


class Conformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.encoder = Encoder(c)
        self.ctc_head = nn.Linear(c["d_model"], c["vocab"])
        self.decoder = Decoder(c) if c["decoder_layers"] > 0 else None

    def loss(self, feats, feat_lens, tokens, token_lens):
        c = self.c
        w = c["ctc_weight"]
        out_lens = torch.div(torch.div(feat_lens - 1, 2, rounding_mode="floor") - 1, 2, rounding_mode="floor")
        enc = self.encoder(feats, out_lens)
        total = None
        if w > 0:
            lp = self.ctc_head(enc).log_softmax(-1).transpose(0, 1)
            ctc = F.ctc_loss(lp, tokens, out_lens, token_lens, blank=BLANK, reduction="mean", zero_infinity=True)
            total = ctc * w
        if w < 1 and self.decoder is not None:
            b, s = tokens.shape
            pos = torch.arange(s + 1, device=tokens.device).unsqueeze(0)
            l = token_lens.unsqueeze(1)
            shifted = torch.cat([torch.full((b, 1), SOS, dtype=torch.long, device=tokens.device), tokens], 1)
            ys_in = torch.where(pos <= l, shifted, torch.full_like(shifted, PAD))
            padded = torch.cat([tokens, torch.full((b, 1), PAD, dtype=torch.long, device=tokens.device)], 1)
            target = torch.where(pos < l, padded, torch.where(pos == l, torch.full_like(padded, EOS),
                                                               torch.full_like(padded, PAD)))
            tgt_pad = pos >= l + 1
            mem_pad = torch.arange(enc.size(1), device=enc.device).unsqueeze(0) >= out_lens.unsqueeze(1)
            logits = self.decoder(ys_in, enc, tgt_pad, mem_pad)
            attn = F.cross_entropy(logits.reshape(-1, c["vocab"]), target.reshape(-1), ignore_index=PAD,
                                   label_smoothing=c["label_smoothing"])
            part = attn * (1 - w)
            total = part if total is None else total + part
        return total


class Twin:
    def __init__(self, spec, data):
        self.model = Conformer(spec["model"])
        self.model.load_state_dict(data["model"], strict=True)
        self.model.train()
        b = data["batch"]
        self.batch = (b["feats"], b["feat_lens"], b["tokens"], b["token_lens"])

    def loss(self):
        return self.model.loss(*self.batch)

    @property
    def noise_grads(self):
        # The depthwise convolution's bias is followed by a batch norm in
        # training mode, which subtracts the batch mean: its gradient is zero
        # in exact arithmetic, and what either side holds is rounding noise
        # (on CUDA in bfloat16, 5e-2 of its own size apart: cuDNN's
        # reductions round differently from run to run).
        return [n for n, _ in self.model.named_parameters() if n.endswith("conv_module.depthwise_conv.bias")]


def build(spec, data):
    return Twin(spec, data)
