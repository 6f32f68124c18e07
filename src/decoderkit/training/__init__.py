"""Training: data, tasks, tokenizers, objective and schedule, the loop, checkpoints, evaluation."""
