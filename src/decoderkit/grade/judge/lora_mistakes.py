"""LoRA's named mistakes (Week 3's ``lora_linear``, ``lora_merge`` and ``lora_init`` items):
the update's scale, the base left trainable, the initialisation that makes step 0 the base,
a merge that changes the base in place. ``catalogue`` adds them to its list."""

from __future__ import annotations

from decoderkit.grade.judge.mistake import Mistake

_LORA = "y = x W^T + b + (alpha / r) (x A^T) B^T, A (r, in), B (out, r)"
_MERGE = "W' = W + (alpha / r) B A, a new tensor: W itself unchanged"
_INIT = "A ~ Kaiming-uniform (a = sqrt(5): |A| <= 1 / sqrt(in)), B = 0: step 0 is the base"
_W3 = "week 3 (LoRA: Hu et al. 2021; PEFT's LoraLayer)"

LORA_MISTAKES = (
    Mistake("lora_scale_forgotten", "the low-rank update is added without its scale alpha / r",
            "LoRA adds (alpha / r) B A x: the scale keeps the update's size independent of the "
            "rank, so alpha (and the learning rate) need not change with r. Without it the "
            "update is r / alpha times too large, and an adapter trained elsewhere (PEFT's) "
            "computes another model here.", _LORA, _W3),
    Mistake("lora_scale_alpha_times_r", "the update is scaled by alpha * r, not alpha / r",
            "The scale is alpha divided by the rank (rsLoRA: by its square root); multiplying "
            "by r makes the update r^2 times too large, growing with the rank instead of "
            "staying put.", _LORA, _W3),
    Mistake("lora_base_trainable", "the base weight is left trainable (a gradient reaches it: "
            "requires_grad)", "LoRA trains A and B alone: the pretrained weight and bias are "
            "frozen (PEFT sets requires_grad False on them), so the optimiser holds no state "
            "for them and the base stays what it was. A forward that lets a gradient reach "
            "W (or b) trains the whole matrix again, at full fine-tuning's memory, and the "
            "adapter no longer describes the change.", _LORA + "; W, b frozen (detached)", _W3),
    Mistake("lora_b_not_zero", "B is not initialised to zero, so step 0 is not the base model",
            "PEFT initialises A randomly (Kaiming-uniform) and B to zeros, so B A = 0 and the "
            "adapted model computes exactly the pretrained one before training; a random B "
            "(or a zero A with a random B, which also stops A's gradient) starts from another "
            "model or cannot learn.", _INIT, _W3),
    Mistake("lora_merged_twice", "the merge adds B A into W in place, so a second merge adds it "
            "again", "Merging writes W + s B A for inference; done in place on the base's "
            "weight, merging twice (or merging, then running the adapter unmerged) applies the "
            "update twice, and the base is lost. Return a new tensor, or keep a merged flag "
            "and refuse (PEFT: 'Already merged').", _MERGE, _W3),
)
