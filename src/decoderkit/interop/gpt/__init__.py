"""The GPT family's formats: Hugging Face GPT-2 / OpenAI GPT directories (and classifiers),
nanoGPT."""
