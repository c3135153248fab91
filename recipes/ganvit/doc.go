// Package ganvit is torchfit's fourth recipe: a conditional GAN and a ViT
// classifier on log-mel spectrograms of music-like clips, with the data on
// the CPU and one batch at a time on the device.
package ganvit
