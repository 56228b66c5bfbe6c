"""Training: datasets from the candidate database, the RL reward, SFT / self-supervised / GRPO."""
