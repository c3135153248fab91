// Package clip is torchfit's second recipe: fine-tuning CLIP on car
// pictures at an effective batch of 128 with the exact contrastive
// gradient (see the README's "Car CLIP" section).
package clip
