"""The cells of the Week 3 transfer notebook (see build.py): GPT-1's fine-tuning pieces, each
followed by a grade(...) cell."""

from course import BLANK, IMPORTS

TRANSFER_W3 = [
    ("md", """
# Week 3: transfer, GPT-1's fine-tuning

GPT-1 (Radford et al. 2018) pre-trains a language model on unlabelled text, then fine-tunes
it on a labelled task with three small changes: the **input transformation** (new start,
delimiter and extract tokens around the text), a **linear head** on the final state at the
extract token, and the **loss** L = L_task + lambda L_LM (lambda = 0.5), which keeps the
language-model objective as an auxiliary term. First decoderkit's own pieces on a tiny model;
then you write the three and grade them. `decoderkit lm finetune` runs the whole recipe
(see docs/transfer.md)."""),
    IMPORTS,
    ("code", """
if __name__ == "__main__":  # Jupyter runs this; `decoderkit grade` on the whole notebook does not
    from decoderkit.nn.lm.classifier import (
        GPTClassifier,
        classifier_config,
        transform,
        with_new_tokens,
    )
    from decoderkit.nn.lm.model import DecoderOnlyLM
    from decoderkit.nn.lm.presets import lm_preset

    torch.manual_seed(0)
    lm = DecoderOnlyLM(lm_preset("nanogpt", vocab_size=20, n_layers=1, d_model=32,
                                 n_heads=4, d_ff=64, max_len=16, dropout=0.0))
    config = classifier_config(lm, ("comedy", "tragedy"))  # start, delimiter, extract: 20, 21, 22
    model = GPTClassifier(with_new_tokens(lm, 3), config).eval()
    ids = transform(config, [3, 1, 4, 1, 5])
    print("input ids:", ids)
    with torch.no_grad():
        probs = model(torch.tensor([ids]), torch.tensor([len(ids) - 1])).softmax(-1)
    print("P(label):", dict(zip(config.labels, probs[0].tolist(), strict=True)))"""),
    ("md", """
## The input transformation

Write `transform_input(first, second, start_id, delimiter_id, extract_id)`: the token ids
`[start] + first + [extract]` for one text (`second` is None), `[start] + first +
[delimiter] + second + [extract]` for a pair. Return a list (or a 1-D tensor) of ids."""),
    ("exercise", """
def transform_input(first, second, start_id, delimiter_id, extract_id):
    ids = [start_id, *first]
    if second is not None:
        ids += [delimiter_id, *second]
    return ids + [extract_id]
""", f"""
def transform_input(first, second, start_id, delimiter_id, extract_id):
{BLANK}
"""),
    ("grade", "grade(transform_input)"),
    ("md", """
## The classification head

Write `classification_head(h, positions, weight)`: `h` (B, T, d) are the model's final hidden
states, `positions` (B,) the index of each row's extract token (rows are right-padded, so it
is not always the last position), `weight` (C, d) the head W_y (no bias). Return the logits
(B, C): `logits[b] = h[b, positions[b]] @ weight.T`."""),
    ("exercise", """
def classification_head(h, positions, weight):
    rows = torch.arange(h.size(0))
    return h[rows, positions] @ weight.T
""", f"""
def classification_head(h, positions, weight):
{BLANK}
"""),
    ("grade", "grade(classification_head)"),
    ("md", """
## The loss with the auxiliary LM objective

Write `transfer_loss(class_logits, labels, lm_logits, lm_targets, lm_mask, lm_coef)`: the mean
cross-entropy of the labels (`class_logits` (B, C), `labels` (B,)) plus `lm_coef` times the
language-model loss: for each example the mean cross-entropy of `lm_targets` (B, T) under
`lm_logits` (B, T, V) over its real positions (`lm_mask` (B, T) True), then the mean over the
examples. Return a scalar."""),
    ("exercise", """
def transfer_loss(class_logits, labels, lm_logits, lm_targets, lm_mask, lm_coef):
    task = F.cross_entropy(class_logits, labels)
    per_token = F.cross_entropy(lm_logits.transpose(1, 2), lm_targets, reduction="none")
    mask = lm_mask.to(per_token.dtype)
    lm = ((per_token * mask).sum(1) / mask.sum(1)).mean()
    return task + lm_coef * lm
""", f"""
def transfer_loss(class_logits, labels, lm_logits, lm_targets, lm_mask, lm_coef):
{BLANK}
"""),
    ("grade", "grade(transfer_loss)"),
    ("md", """
## The whole recipe

```
decoderkit lm data shakespeare-genres --out runs/genres --chars 62
decoderkit lm finetune --checkpoint runs/shakespeare-bpe --data runs/genres/train.tsv \\
    --valid runs/genres/test.tsv --out runs/genres-clf --lr 1e-3 --max-steps 600
```

fine-tunes `make lm-demo`'s model to tell Shakespeare's comedies, histories and tragedies
apart on plays it never saw labelled; `benchmarks/transfer.py` compares it with the same
model trained from scratch and with a bag-of-words classifier."""),
]

NOTEBOOKS = {"week3_transfer": TRANSFER_W3}
