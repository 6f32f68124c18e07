"""Encoder-decoder generation: the decoding step and its cache trace, greedy decoding and
sampling, beam search, the translate pipeline (batches, workers, compiled steps)."""
