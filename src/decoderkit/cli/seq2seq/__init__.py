"""The encoder-decoder's commands: train, translate, eval, convert, export."""
