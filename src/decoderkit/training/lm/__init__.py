"""The decoder-only LM family's training: its tokenizer, text data and blocks, AdamW/cosine
objective, its recipe for ``training.loop``, its run directory, and the Shakespeare text."""
