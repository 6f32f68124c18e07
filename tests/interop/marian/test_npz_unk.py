"""A Marian ``.npz`` model with separate vocabularies (issue 45's: post-norm, --tied-embeddings,
900 Spanish and 1,000 English pieces, trained on the Bible) reads its sources as Marian does
and never chooses ``<unk>``, as Marian's translator does unless ``--allow-unk``: each
vocabulary is learned from its own side, so the English one lacks characters of the text
('!', '(', ')'), the model learns ``<unk>`` for them, and choosing it is where a decoder
that allows it parts from Marian's translator."""

from __future__ import annotations

import pytest
import sentencepiece

from decoderkit.cli import main
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.marian import npz as marian_npz
from interop.marian_npz_helpers import (
    agree,
    bible_test,
    marian_outputs,
    our_outputs,
    trained,
)

pytest.importorskip("pymarian", reason="pymarian is not installed (pip install pymarian): "
                    "Marian's own models cannot be trained or run here")

MODEL = "bible-post-tied-separate"
UNK_LINES = 800  # test verses looked through for the lines where <unk> is chosen (about 1%)


@pytest.fixture(scope="module")
def model(request):
    cache = request.config.cache.mkdir("marian-npz-models")
    return trained(cache, MODEL), bible_test(cache, UNK_LINES)


def test_source_ids_and_unknown_characters_are_marians(model):
    """Marian encodes a source with sentencepiece's own ids and adds EOS (its
    SentencePieceVocab::encode); ours are the same ids, and the characters ``translate``
    names as read as <unk> are those sentencepiece gives its unk id."""
    directory, lines = model
    ckpt = load_checkpoint(directory)
    lines = lines[:200]
    src, _ = marian_npz.vocabulary_paths(directory / marian_npz.MODEL)
    spm = sentencepiece.SentencePieceProcessor(model_file=str(src))
    for line in lines:
        assert ckpt.src_tokenizer.encode(line) == [*spm.encode(line), spm.piece_to_id("</s>")]
    unknown = {c for line in lines for c in ckpt.src_tokenizer.unknown_characters(line)}
    assert unknown and unknown == {c for line in lines for c in set(line) if not c.isspace()
                                   and spm.unk_id() in spm.encode(c)}


def test_unk_is_never_chosen_as_in_marians_translator(model, capsys):
    """On the lines where a decoder that allows <unk> chooses it, Marian's translator with its
    defaults gives another output and so does ours (the .npz model's own setting); with
    --allow-unk both choose it again."""
    directory, lines = model
    ckpt = load_checkpoint(directory)
    allowed = our_outputs(ckpt, lines, beam=1, ban_unk=False)
    chose = [line for line, o in zip(lines, allowed, strict=True) if "<unk>" in o.tokens]
    assert len(chose) >= 3, f"<unk> chosen on {len(chose)} lines: too few to test the ban"
    ours, theirs = our_outputs(ckpt, chose, beam=1), marian_outputs(directory, chose, beam=1)
    assert not any("<unk>" in o.tokens for o in ours)
    assert sum(agree(o, t) for o, t in zip(ours, theirs, strict=True)) >= 0.9 * len(chose)
    free = [o for o in allowed if "<unk>" in o.tokens]
    assert not any(agree(o, t) for o, t in zip(free, theirs, strict=True))  # the ban matters
    theirs_free = marian_outputs(directory, chose, beam=1, allow_unk=True)
    assert sum(agree(o, t) for o, t in zip(free, theirs_free, strict=True)) >= 0.9 * len(chose)
    assert main(["translate", "--checkpoint", str(directory), *chose]) == 0
    assert capsys.readouterr().out.splitlines() == [o.text for o in ours]
    assert main(["translate", "--checkpoint", str(directory), "--allow-unk", *chose]) == 0
    assert capsys.readouterr().out.splitlines() == [o.text for o in free]
