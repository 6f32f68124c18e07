def transformer_decoder(*a): raise NotImplementedError
