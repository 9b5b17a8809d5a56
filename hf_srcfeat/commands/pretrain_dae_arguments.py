"""The arguments of `hf-srcfeat-pretrain-dae` beside Seq2SeqTrainingArguments, kept apart from the training code
so that `--help` answers without loading torch (`console_scripts`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DaeArguments:
    tokenizer_name_or_path: str | None = field(default=None, metadata={
        "help": "Use this tokenizer (e.g. the translation run's); by default train the joint Multi30k one."})
    vocab_size: int = field(default=8000, metadata={"help": "Subword vocabulary size for a new tokenizer."})
    subword_model: str = "bpe"
    d_model: int = 256
    encoder_layers: int = field(default=3, metadata={"help": "J, the LFE's number of layers."})
    decoder_layers: int = 3
    attention_heads: int = 4
    ffn_dim: int = 1024
    dropout: float = 0.1
    layernorm_position: str = "pre"
    data_dir: str | None = field(default=None, metadata={"help": "Multi30k folder (default: env, else download)."})
    dataset_name: str | None = field(default=None, metadata={
        "help": "Monolingual data from `datasets` (Hub id, folder, script) instead of Multi30k: its `text` column, "
                "--text_column, or the --source_lang side of a `translation` column (needs --tokenizer_name_or_path)."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration, e.g. de-en."})
    train_file: str | None = field(default=None, metadata={
        "help": "Monolingual training data: .txt (one sentence a line) or JSON lines, .gz allowed (needs "
                "--tokenizer_name_or_path)."})
    validation_file: str | None = field(default=None, metadata={"help": "As --train_file, for the reconstruction BLEU."})
    text_column: str | None = field(default=None, metadata={"help": "The text column of JSON lines or a dataset."})
    source_lang: str = "en"
    target_lang: str = field(default="de", metadata={"help": "Only for training the joint tokenizer."})
    ewt_dir: str | None = field(default=None, metadata={
        "help": "Folder with en_ewt-ud-train.conllu(.gz): add its sentences to the monolingual data."})
    max_train_samples: int | None = None
    max_eval_samples: int = 200
    max_length: int = 128
    max_tokens_per_batch: int | None = field(default=None, metadata={
        "help": "Token-based batching (fairseq --max-tokens): batches of sentences of similar length holding at most "
                "this many padded tokens (rows x longest sentence), instead of per_device_train_batch_size "
                "sentences."})
    batch_size_multiple: int = field(default=1, metadata={
        "help": "With --max_tokens_per_batch: sentences per batch rounded down to a multiple of this (fairseq "
                "--required-batch-size-multiple), as hf-srcfeat-train's option."})
    swaps: int = 3
    drop_ratio: float = 0.1
    mask_ratio: float = 0.2
    stanza_dir: str | None = None
    annotation_cache: str | None = None
    overwrite_output_dir: bool = False
