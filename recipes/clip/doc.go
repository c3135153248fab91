// Package clip is torchfit's second recipe: fine-tuning CLIP on car
// pictures at an effective batch of 128 (micro-batch 16 × 8 accumulation
// steps, the seed's "Memory Optimization Fixes for CUDA OOM") — with the
// exact contrastive gradient.
//
// # Why not plain accumulation
//
// The seed splits a batch of 128 into 8 micro-batches of 16, divides each
// micro-batch's loss by 8 and calls the result "the same training
// quality". For CLIP's contrastive loss it is another loss: each sample is
// scored against the 15 other samples of its micro-batch, not the 127 of
// the batch. The exact mode (the default, --contrastive-accumulation
// exact) trains the batch's 128-way loss through the training core's
// grad-cache step (train.Config.Contrastive → Engine.GradCache): every
// micro-batch is embedded without grad, the loss of all 128 embeddings is
// backpropagated to the embeddings, then each micro-batch is embedded
// again with grad and backpropagated with its slice of that gradient.
// Memory stays that of one micro-batch plus the batch's embeddings; the
// price is a second forward pass. The naive mode reproduces the seed.
// Training runs in one process: data parallel (torchfit launch, torchrun)
// is refused, since the exact loss would need every rank's embeddings.
//
// # Data
//
// Data sets are drawn in Go, deterministically from a seed (Generate, `torchfit
// clip data`): side views of cars — 8 colours × 6 body types (sedan,
// hatchback, SUV, pickup truck, van, sports car) × 2 directions, on varied
// skies, grounds and roadsides, at random places and sizes, with colour
// jitter and pixel noise — and, for pretraining, coloured shapes (arrows
// and triangles pointing left or right). They are written as PNG files and
// a JSONL manifest (file, split, caption, attributes) rather than drawn on
// the fly, so that a set can be looked at, reused by other tools and
// replaced by real photographs in the same layout. One image in 20 is
// validation and two are held-out test images; their captions come from
// held-out templates, new sentences of words the training captions use.
// The loader decodes images in worker goroutines (prefetch 2, the seed's)
// and keeps data on the CPU; on CUDA it pins batches.
//
// # Model
//
// Model is OpenAI's CLIP (ViT image tower, causal text transformer,
// projections, learned logit_scale clamped to ln 100 after each step as
// open_clip does, symmetric cross-entropy) with OpenAI's state-dict names,
// so a state dict saved by Python's torch.save(model.state_dict()) loads
// strictly (Infer reads its configuration from the shapes, as OpenAI's
// build_model does). Captions are tokenised by a word vocabulary laid out
// as CLIP's ids (0 pads, start and end of text the two highest ids).
// Presets: "cpu" (1.74M parameters, 64×64 images in 16×16 patches) and
// "vit-b32" (ViT-B/32's shapes); --vram chooses micro-batch and
// accumulation for a GPU size.
//
// # Commands
//
//	torchfit clip data --out DIR [--kind cars|shapes] [--images N]
//	torchfit clip pretrain --data SHAPES              (random weights → shapes)
//	torchfit clip train --data CARS --init FILE       (the seed's settings: 16 × 8, 20 epochs, lr 2e-5)
//	torchfit clip eval --checkpoint FILE --data CARS  (zero-shot accuracy, text→image R@1 on held-out data)
//	torchfit clip measure                             (peak memory and step time of the layouts)
package clip
