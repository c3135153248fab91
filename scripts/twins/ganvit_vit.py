"""The Python twin of recipes/ganvit's genre classifier (make bench-recipes).

torchvision's own VisionTransformer (the class vit_b_16 builds) at the
preset's shapes: its state-dict names are the ones recipes/ganvit's ViT
carries, so it loads the weights torchfit initialised strictly. The loss is
the recipe's Classifier.Loss: spectrograms (N, 1, mels, frames) resized
bilinearly to the ViT's image and repeated to three channels
(ganvit.Images), cross-entropy against the genre.
"""
import torch
import torch.nn.functional as F
import torchvision


class Twin:
    def __init__(self, spec, data):
        c = spec["model"]
        self.image = c["image"]
        self.model = torchvision.models.VisionTransformer(
            image_size=c["image"], patch_size=c["patch"], num_layers=c["layers"], num_heads=c["heads"],
            hidden_dim=c["hidden"], mlp_dim=c["mlp"], num_classes=c["classes"])
        self.model.load_state_dict(data["model"], strict=True)
        self.model.train()
        self.spec, self.label = data["batch"]["spec"], data["batch"]["label"]

    def loss(self):
        x = F.interpolate(self.spec, size=(self.image, self.image), mode="bilinear", align_corners=False)
        x = x.expand(x.size(0), 3, self.image, self.image)
        return F.cross_entropy(self.model(x), self.label)


def build(spec, data):
    return Twin(spec, data)
