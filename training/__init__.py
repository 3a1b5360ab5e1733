"""Tools that make checkpoints: the tokenizer and chat template, and (issue 3) the demo model."""
