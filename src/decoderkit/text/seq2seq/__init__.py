"""The encoder-decoder family's text: the word-level tokenizer (``tokenizer``) and the
SentencePiece tokenizers of Marian models (``spm_tokenizer``)."""
