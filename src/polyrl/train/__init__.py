"""Training: config, SFT warm start, multi-task RL, checkpoints, run directories."""
