"""The Python twin of recipes/tts's GPT and its frozen codec (make bench-recipes).

The forward is the recipe's tests' PyTorch re-implementation
(recipes/tts/model_test.go, gptPyScript): the codec's codes under no_grad,
the conditioning encoder (torch.nn.TransformerEncoderLayer and
MultiheadAttention, whose parameter names the recipe's carry), the text
and audio embeddings, the causal pre-norm blocks, both heads and XTTS's
loss weighting (text CE × text weight × text ratio + code CE × code
weight, over the batch's codes). Its parameters live in a module tree
built from torchfit's state-dict names, so the runner loads the weights
strictly and finds the gradients by name; the codec's are frozen.
Dropout is off on both sides (the bench sets the GPT's to 0).
"""
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MODULES = {"gpt.cond.layer.": "layer", "gpt.cond.attn.": "attn"}


def tree(sd, g):
    root = nn.Module()
    D, H = g["decoder_dim"], g["heads"]
    real = {"gpt.cond.layer.": nn.TransformerEncoderLayer(D, H, g["ff"], dropout=0.0, activation="gelu",
                                                          batch_first=True, norm_first=True),
            "gpt.cond.attn.": nn.MultiheadAttention(D, H, batch_first=True)}
    for k, v in sd.items():
        pre = next((p for p in real if k.startswith(p)), None)
        parts = (pre[:-1] if pre else k).split(".")
        m = root
        for p in parts[:-1]:
            if p not in m._modules:
                m.add_module(p, nn.Module())
            m = m._modules[p]
        if pre:
            if parts[-1] not in m._modules:
                m.add_module(parts[-1], real[pre])
            continue
        m.register_parameter(parts[-1], nn.Parameter(torch.empty_like(v), requires_grad=not k.startswith("codec.")))
    return root, real


class Twin:
    def __init__(self, spec, data):
        self.cc, self.g = json.loads(spec["model"]["codec"]), json.loads(spec["model"]["gpt"])
        self.model, real = tree(data["model"], self.g)
        self.model.load_state_dict(data["model"], strict=True)
        self.model.train()
        self.layer, self.mha = real["gpt.cond.layer."], real["gpt.cond.attn."]
        self.b = data["batch"]

    def loss(self):
        P = dict(self.model.named_parameters())
        cc, g, b = self.cc, self.g, self.b

        def conv(x, p, stride=1, pad=0):
            return F.conv1d(x, P[p + '.weight'], P[p + '.bias'], stride=stride, padding=pad)

        def res(x, p):
            return x + conv(F.relu(conv(F.relu(x), p + '.conv1', pad=1)), p + '.conv2')

        def l2n(x):
            return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)

        mel, cond, ids, kind, pos, cidx, tk = (b[k] for k in ['mel', 'cond', 'ids', 'kind', 'pos', 'code_idx', 'tk'])
        with torch.no_grad():
            x = conv(mel.transpose(1, 2), 'codec.enc_in', pad=1)
            for i in range(cc['res_depth']):
                x = res(x, 'codec.enc_pre.%d' % i)
            x = conv(F.relu(x), 'codec.enc_down', stride=2, pad=1)
            for i in range(cc['res_depth']):
                x = res(x, 'codec.enc_post.%d' % i)
            z = l2n(conv(F.relu(x), 'codec.enc_out').transpose(1, 2))
            codes = (z @ l2n(P['codec.codebook']).T).argmax(-1)
        filled = torch.where(cidx >= 0, codes.gather(1, cidx.clamp_min(0)), ids)
        D, H = g['decoder_dim'], g['heads']
        x = F.gelu(conv(cond.transpose(1, 2), 'gpt.cond.conv1', pad=1))
        x = F.gelu(conv(x, 'gpt.cond.conv2', stride=2, pad=1).transpose(1, 2))
        T2 = x.shape[1]
        valid = [min((min(l, cond.shape[1]) + 1) // 2, T2) for l in b['cond_lens'].tolist()]
        mask = torch.arange(T2, device=x.device).unsqueeze(0) >= torch.tensor(valid, device=x.device).unsqueeze(1)
        x = self.layer(x, src_key_padding_mask=mask)
        q = P['gpt.cond.latents'].unsqueeze(0).expand(x.shape[0], -1, -1)
        out = self.mha(q, x, x, key_padding_mask=mask, need_weights=False)[0]
        lat = F.layer_norm(out + q, (D,), P['gpt.cond.norm.weight'], P['gpt.cond.norm.bias'])
        audio = kind == 2
        zero = torch.zeros_like(ids)
        te = F.embedding(torch.where(audio, zero, filled), P['gpt.text_embed.weight'])
        if 'gpt.text_proj.weight' in P:
            te = te @ P['gpt.text_proj.weight'].T
        te = te + F.embedding(torch.where(audio, zero, pos), P['gpt.text_pos.weight'])
        ae = F.embedding(torch.where(audio, filled, zero), P['gpt.audio_embed.weight']) + \
            F.embedding(torch.where(audio, pos, zero), P['gpt.audio_pos.weight'])
        x = torch.cat([lat, torch.where(audio.unsqueeze(-1), ae, te)], 1)
        B, L = x.shape[0], x.shape[1]
        dh = D // H
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)
        for i in range(g['layers']):
            p = 'gpt.blocks.%d.' % i
            h = F.layer_norm(x, (D,), P[p + 'ln1.weight'], P[p + 'ln1.bias'])
            qkv = F.linear(h, P[p + 'qkv.weight'], P[p + 'qkv.bias']).view(B, L, 3, H, dh).permute(2, 0, 3, 1, 4)
            s = qkv[0] @ qkv[1].transpose(-2, -1) / math.sqrt(dh)
            s = s.masked_fill(causal, float('-inf'))
            y = (s.softmax(-1) @ qkv[2]).transpose(1, 2).reshape(B, L, D)
            x = x + F.linear(y, P[p + 'proj.weight'], P[p + 'proj.bias'])
            h = F.layer_norm(x, (D,), P[p + 'ln2.weight'], P[p + 'ln2.bias'])
            x = x + F.linear(F.gelu(F.linear(h, P[p + 'fc1.weight'], P[p + 'fc1.bias'])), P[p + 'fc2.weight'], P[p + 'fc2.bias'])
        x = F.layer_norm(x, (D,), P['gpt.ln_f.weight'], P['gpt.ln_f.bias'])
        N, Lt = g['cond_latents'], ids.shape[1]
        hp = x[:, N:N + Lt - 1]
        tgt, t1 = filled[:, 1:], tk[:, 1:]
        ign = torch.full_like(tgt, -100)
        textT = torch.where(t1 == 1, tgt, ign).reshape(-1)
        codeT = torch.where(t1 == 2, tgt, ign).reshape(-1)
        tl = F.cross_entropy(F.linear(hp, P['gpt.text_head.weight'], P['gpt.text_head.bias']).reshape(-1, g['vocab'] + 2),
                             textT, reduction='sum')
        cl = F.cross_entropy(F.linear(hp, P['gpt.audio_head.weight'], P['gpt.audio_head.bias']).reshape(-1, g['codes'] + 2),
                             codeT, reduction='sum')
        return (tl * g['text_weight'] * g['text_ratio'] + cl * g['code_weight']) / (t1 == 2).sum().clamp_min(1)


def build(spec, data):
    return Twin(spec, data)
