"""``open_export`` refuses a --model that holds anything but an export for its engine (a
language model's export, a checkpoint, another engine's export), naming what it is and the
command that takes it, before any file of it is read as the engine's."""

from pathlib import Path

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.interop.engines import open_export

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.mark.parametrize("name, engine, what, use", [
    ("lm_export_hf_75f131b", "ctranslate2", "a Hugging Face GPT-2 / OpenAI GPT directory, a "
     "language model", "decoderkit lm sample --checkpoint"),
    ("seq2seq_train_75f131b", "onnxruntime", "a decoderkit translation checkpoint (train), a "
     "translation model", "decoderkit translate --checkpoint"),
    ("ct2_export_75f131b", "onnxruntime", "a CTranslate2 export (decoderkit export --to "
     "ctranslate2), a translation model", "decoderkit translate --engine ctranslate2 --model"),
])
def test_a_model_that_is_no_export_for_the_engine_is_named(name, engine, what, use):
    path = FIXTURES / name
    with pytest.raises(UsageError) as caught:
        open_export(engine, path)
    assert str(caught.value) == (f"--model {path} is {what}, not an export for --engine "
                                 f"{engine}; use `{use} {path}`")


def test_a_hugging_face_directory_of_an_unread_type_says_so(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gemma"}')
    with pytest.raises(UsageError, match="model_type 'gemma', which decoderkit does not read "
                       r"\(it reads model_type .*\), not an export for --engine ctranslate2; "
                       "decoderkit runs no such model$"):
        open_export("ctranslate2", tmp_path)
