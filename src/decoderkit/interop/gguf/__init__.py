"""GGUF, llama.cpp's file format: a decoder-only LM written as one ``model.gguf`` (the ``gguf``
package writes it), each architecture llama.cpp knows in its own module."""
