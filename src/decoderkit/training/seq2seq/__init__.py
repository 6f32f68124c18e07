"""The encoder-decoder family's training: parallel corpora and teacher-forcing batches, built-in
tasks, its tokenizers, the data a run trains on, its recipe for ``training.loop``, validation by
BLEU/chrF, and its checkpoint format."""
