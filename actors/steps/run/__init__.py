"""A run's folder and its state: run.json (RunState) written by one owner, checkpoints, resume, stop rule."""
