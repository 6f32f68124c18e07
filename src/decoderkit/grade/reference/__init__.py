"""The float64 references and their mistaken variants: the decoder-block family with
switches (``blocks``), the decoder-only family (``gpt``), and the pieces outside any block
(``pieces``: positions, embeddings, label smoothing, the warm-up rate, decode loops)."""
