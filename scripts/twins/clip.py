"""The Python twin of recipes/clip (make bench-recipes).

The model is OpenAI's CLIP code as recipes/clip's own tests write it out
(recipes/clip/testdata/twin.py: OpenAI's module names, so it loads the
weights torchfit initialised strictly). The step is the recipe's, as a
PyTorch user writes it:

  exact (the default): grad cache (Gao et al. 2021) over the step's
      micro-batches -- each micro-batch embedded under torch.no_grad, the
      contrastive loss of all the step's embeddings backpropagated to the
      embeddings, then each micro-batch embedded again with grad and
      backpropagated with its slice of that gradient;
  naive: each micro-batch's own contrastive loss, weighted by its share
      of the batch, backpropagated in turn (the seed's accumulation).

Embeddings are computed under autocast for bf16, the loss in float32; the
runner's AdamW (betas 0.9/0.98, eps 1e-6, the file's groups) and clipping
follow, and logit_scale is clamped to [0, ln 100] after each step.
"""
import importlib.util
import math
import os
import sys

import torch
import torch.nn.functional as F

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "recipes", "clip", "testdata", "twin.py")
_spec = importlib.util.spec_from_file_location("clip_openai_twin", _path)
openai = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = openai  # torch.compile looks modules up by name
_spec.loader.exec_module(openai)

MAX_LOGIT_SCALE = math.log(100)


def contrastive(model, img, txt):
    """CLIP's symmetric cross-entropy, in recipes/clip's order of ops."""
    i = img / img.norm(dim=-1, keepdim=True)
    t = txt / txt.norm(dim=-1, keepdim=True)
    logits = (i @ t.t()) * model.logit_scale.exp()
    labels = torch.arange(logits.size(0), device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


class Twin:
    def __init__(self, spec, data):
        c = dict(spec["model"])
        self.mode = c.pop("mode")
        self.model = openai.CLIP(**c)
        self.model.load_state_dict(data["model"], strict=True)
        self.model.train()
        self.images, self.text = data["batch"]["image"], data["batch"]["text"]
        self.micro = int(spec["micro_batch"])
        self.bf16 = spec["precision"] == "bf16"
        self.device_type = spec.get("device_type", "cpu")

    def embed(self, i, j):
        with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.bf16):
            return self.model.encode_image(self.images[i:j]), self.model.encode_text(self.text[i:j])

    def backward(self):
        n = self.images.size(0)
        chunks = [(i, min(i + self.micro, n)) for i in range(0, n, self.micro)]
        if self.mode == "naive":
            # As torchfit's trainer: the micro-batches' losses summed on
            # the device in float64 and read once, after the last backward.
            total = None
            for i, j in chunks:
                img, txt = self.embed(i, j)
                loss = contrastive(self.model, img.float(), txt.float())
                if len(chunks) > 1:
                    loss = loss * ((j - i) / n)
                loss.backward()
                value = loss.detach().double() if len(chunks) > 1 else loss.detach()
                total = value if total is None else total + value
            return total.item()
        if len(chunks) == 1:
            img, txt = self.embed(0, n)
            loss = contrastive(self.model, img.float(), txt.float())
            loss.backward()
            return loss.item()
        with torch.no_grad():
            embs = [self.embed(i, j) for i, j in chunks]
        img = torch.cat([e[0] for e in embs]).float().requires_grad_()
        txt = torch.cat([e[1] for e in embs]).float().requires_grad_()
        del embs
        loss = contrastive(self.model, img, txt)
        loss.backward()
        for i, j in chunks:
            a, b = self.embed(i, j)
            surrogate = (a.float() * img.grad[i:j]).sum() + (b.float() * txt.grad[i:j]).sum()
            surrogate.backward()
        return loss.item()  # as torchfit's grad cache: read once the last backward is queued

    def after_step(self):
        with torch.no_grad():
            self.model.logit_scale.clamp_(0, MAX_LOGIT_SCALE)


def build(spec, data):
    return Twin(spec, data)
