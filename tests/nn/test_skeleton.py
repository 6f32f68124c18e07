"""nn.skeleton: a model built for the weights pipeline to fill draws no random numbers and
touches none of its parameters' memory, with its ties and computed buffers as a normal
build's; outside it, initialisation is as before."""

from __future__ import annotations

import torch

from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.skeleton import skeleton


def config(**kw) -> LMConfig:
    return LMConfig(vocab_size=50, n_layers=2, d_model=16, n_heads=4, d_ff=32, max_len=24,
                    dropout=0.0, tie_head=True, **kw)


def test_no_draw_ties_and_buffers_as_built():
    for kw in ({}, {"positions": "rope", "norm": "rms"}, {"positions": "sinusoidal"}):  # no
        # buffer; RoPE's frequencies; the sinusoid table
        torch.manual_seed(0)
        state = torch.get_rng_state()
        empty = skeleton(DecoderOnlyLM, config(**kw))
        assert torch.equal(torch.get_rng_state(), state)  # nothing drawn
        built = DecoderOnlyLM(config(**kw))
        assert not torch.equal(torch.get_rng_state(), state)  # a normal build draws
        assert empty.generator.proj.weight is empty.embed.lut.weight
        buffers, made = dict(built.named_buffers()), dict(empty.named_buffers())
        assert set(made) == set(buffers) and all(torch.equal(b, buffers[k])
                                                 for k, b in made.items())
        assert [(k, p.shape) for k, p in empty.named_parameters()] == \
            [(k, p.shape) for k, p in built.named_parameters()]


def test_initialisation_outside_is_untouched():
    skeleton(DecoderOnlyLM, config())
    layer = torch.nn.Linear(4, 4)
    torch.nn.init.zeros_(layer.weight)
    assert not layer.weight.any()
    torch.nn.init.normal_(layer.weight)
    assert layer.weight.any()
