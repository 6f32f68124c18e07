"""The Llama family (Llama, Mistral, Qwen2, Qwen3): Hugging Face directories in and out."""
