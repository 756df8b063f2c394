"""Character-level tokenizer built with `tokenizers`, wrapped as a transformers `PreTrainedTokenizerFast`.

One token per printable ASCII character plus newline and tab; ``<bos>`` is prepended by the post-processor.
Padding side is left (for generation); training code pads right itself.
"""

from __future__ import annotations

import string
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
CHARACTERS = "\n\t" + "".join(ch for ch in string.printable if ch.isprintable())


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A char-level tokenizer: ids 0-3 are <pad>, <bos>, <eos>, <unk>; then newline, tab and printable ASCII."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARACTERS:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern=Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(folder: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved with ``save_pretrained`` from a local folder (never from a hub)."""
    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"no tokenizer.json in {folder}")
    return PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
