// Package mamba is torchfit's third recipe: a Mamba language model (Gu and
// Dao, 2023) trained on the King James Bible with GPT-2's tokenizer.
package mamba
