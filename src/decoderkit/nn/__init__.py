"""The model pieces: masks, attention, layers, embeddings, the encoder-decoder, seed 002's block."""
