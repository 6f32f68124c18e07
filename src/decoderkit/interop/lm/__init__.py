"""What every decoder-only LM's Hugging Face directory shares, whatever its architecture
(GPT-2's ``interop.gpt``, Llama's ``interop.llama``): the tokenizer files and the generation
settings, read (``directory``) and written (``export``)."""
