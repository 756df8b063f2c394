"""The model organism: a char tokenizer, tiny Qwen3 models, and task families with verifiable answers."""
