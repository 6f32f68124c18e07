"""The encoder-decoder family's interop shared by its export formats (CTranslate2, ONNX,
Marian): the exports' manifest."""
