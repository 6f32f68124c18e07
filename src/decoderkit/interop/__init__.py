"""Other engines' formats: PyTorch's ``nn.Transformer`` modules (and exports to serving engines)."""
