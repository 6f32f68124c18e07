"""Inference: the decoding step, greedy, sampling, beam search, faster steps, the translator."""
