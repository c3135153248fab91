// Package tts is torchfit's XTTS-style text-to-speech recipe.
package tts
