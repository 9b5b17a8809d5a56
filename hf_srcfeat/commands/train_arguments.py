"""The arguments of `hf-srcfeat-train` beside Seq2SeqTrainingArguments, kept apart from the training code so that
`hf-srcfeat-train --help` answers without loading torch (`console_scripts`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hf_srcfeat.auto_registration import MODEL_TYPES
from hf_srcfeat.decoding_options import DECODING_OPTIONS
from hf_srcfeat.variants import VARIANTS

#: The flag that lists every option, Seq2SeqTrainingArguments' included.
HELP_ALL = "--help_all"


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "Start from this trained model (path or Hub id) instead of a new one."})
    tokenizer_name_or_path: str | None = field(default=None, metadata={
        "help": "Use this tokenizer; by default a joint subword tokenizer is trained on the training data."})
    model_type: str = field(default="srcfeat_transformer", metadata={
        "help": f"One of {list(MODEL_TYPES)}; `--help_model TYPE` lists its settings, which --config_overrides "
                "sets."})
    variant: str | None = field(default=None, metadata={
        "help": "A named set-up (model type + settings), by the benchmark's names: "
                + ", ".join(f"{name}{' (CTranslate2)' if one.ctranslate2 else ''}" for name, one in VARIANTS.items())
                + "; --config_overrides may change its settings."})
    init_from: str | None = field(default=None, metadata={
        "help": "Start from a pretrained translation checkpoint (Marian/OPUS-MT, NLLB or M2M100, mBART; Hub id or "
                "folder): converted into the backbone, its own tokenizer given source features, and --model_type "
                "grafted onto it so that training starts from the checkpoint's translations (srcfeat_transformer: "
                "plain fine-tuning). The size arguments are the checkpoint's."})
    source_lang_code: str | None = field(default=None, metadata={
        "help": "With --init_from: the checkpoint tokenizer's source language code, e.g. eng_Latn (NLLB) or en_XX "
                "(mBART-50)."})
    target_lang_code: str | None = field(default=None, metadata={
        "help": "With --init_from: the target language code, forced as the first target token, e.g. deu_Latn."})
    freeze_pretrained: bool = field(default=False, metadata={
        "help": "With --init_from: train only the parameters the method adds."})
    added_learning_rate: float | None = field(default=None, metadata={
        "help": "With --init_from: the learning rate of the added parameters (default --learning_rate)."})
    unfreeze_after_steps: int | None = field(default=None, metadata={
        "help": "With --freeze_pretrained: train every parameter from this step on."})
    subword_model: str = field(default="bpe", metadata={
        "help": "bpe, unigram or word (whole words, the --vocab_size most frequent, the rest <unk>) for a new "
                "tokenizer."})
    pos_tagset: str = field(default="upos", metadata={
        "help": "What the POS feature holds (for a new tokenizer): upos (17 universal tags) or xpos (the parser's "
                "language-specific tags, e.g. Penn Treebank for English, as CoreNLP gave the papers)."})
    vocab_size: int = field(default=8000, metadata={"help": "Subword vocabulary size (for a new tokenizer)."})
    max_lemmas: int = field(default=10000, metadata={
        "help": "Largest lemma vocabulary of a new tokenizer, most frequent first (0: no limit; rarer lemmas are "
                "<unk>)."})
    lemma_min_frequency: int = field(default=2, metadata={
        "help": "Lemmas seen fewer times in the training sources are <unk> (for a new tokenizer)."})
    tokenizer_only: bool = field(default=False, metadata={
        "help": "Only build the feature-aware tokenizer (parsing the sources, cached) into --output_dir, then stop: "
                "e.g. the joint tokenizer that a pre-trained latent feature encoder shares with its translation "
                "model (hf-srcfeat-pretrain-dae --tokenizer_name_or_path)."})
    d_model: int = field(default=256, metadata={"help": "Model width, from scratch (the recipes' size)."})
    encoder_layers: int = field(default=3, metadata={"help": "Encoder layers, from scratch."})
    decoder_layers: int = field(default=3, metadata={"help": "Decoder layers, from scratch."})
    attention_heads: int = field(default=4, metadata={"help": "Attention heads of every layer, from scratch."})
    ffn_dim: int = field(default=1024, metadata={"help": "Width of the feed-forward sublayers, from scratch."})
    dropout: float = field(default=0.3, metadata={
        "help": "Dropout of the model's sublayers and embeddings (with --init_from: given, it replaces the "
                "checkpoint's)."})
    label_smoothing: float = field(default=0.1, metadata={
        "help": "Label smoothing of the model's own loss (training and evaluation losses alike; with --init_from too)."})
    layernorm_position: str = field(default="pre", metadata={
        "help": "pre (LayerNorm before each sublayer) or post (after the residual sum, as the original Transformer); "
                "with --init_from the checkpoint's, not an option."})
    config_overrides: str | None = field(default=None, metadata={
        "help": "JSON object of further config arguments, e.g. '{\"attention_dropout\": 0.1}'; beside a recipe, "
                "added to the recipe's (its keys win)."})


@dataclass
class DataArguments:
    dataset_name: str | None = field(default=None, metadata={
        "help": "A `datasets` source (Hub id, local folder, loading script) with a `translation` column or "
                "--source_column/--target_column; `multi30k` (the default when no file is given) reads Multi30k."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration, e.g. ro-en."})
    train_file: str | None = field(default=None, metadata={
        "help": "JSON lines {\"translation\": {src: ..., tgt: ...}}, a two-column .tsv, or a prefix P of the text files "
                "P.<source_lang> and P.<target_lang> (.gz allowed)."})
    validation_file: str | None = field(default=None, metadata={"help": "As --train_file."})
    test_file: list[str] | None = field(default=None, metadata={
        "help": "One or more test sets (as --train_file); with --do_predict each is scored, its translations written to "
                "test_predictions.txt (one set) or test_<name>_predictions.txt (several).",
        "nargs": "+"})
    source_column: str | None = field(default=None, metadata={"help": "Source text column of --dataset_name."})
    source_parse_column: str | None = field(default=None, metadata={
        "help": "Column of --dataset_name (or field of the JSON lines) holding each source's CoNLL-U parse, from any "
                "parser: used instead of parsing with Stanza."})
    source_factor_columns: list[str] | None = field(default=None, metadata={
        "help": "Columns of --dataset_name (or fields of the JSON lines) each holding a factor of your own, one value "
                "per source word, space-separated (named-entity tags, domain tags, clusters, ...); the factor is named "
                "after its column (factor_<column>_ids; a relevance model embeds it with source_factors). The "
                "values follow the parse's words with --source_parse_column, else the source's whitespace-separated "
                "words, which are then parsed as given.", "nargs": "+"})
    inline_source_factors: list[str] | None = field(default=None, metadata={
        "help": "The source sentences carry factors inline in OpenNMT-py's format, word\uffe8value1\uffe8value2 (U+FFE8): "
                "their names, in order (as hf-srcfeat-translate --input_format factored --factor_names). The words are "
                "parsed as given and each gets its values.", "nargs": "+"})
    target_column: str | None = field(default=None, metadata={"help": "Target text column of --dataset_name."})
    skip_empty_pairs: bool = field(default=False, metadata={
        "help": "Drop the training and validation pairs whose source or target is empty (counted in the log and "
                "results.json), as OpenNMT-py and Sockeye do; without it such a pair is an error naming its line. "
                "Test sets keep every line (their predictions are written line for line)."})
    data_dir: str | None = field(default=None, metadata={
        "help": "Folder with Multi30k {split}.{lang}.gz (default: $HF_SRCFEAT_MULTI30K_DIR, else download)."})
    source_lang: str = field(default="en", metadata={"help": "Source language code (file suffixes, columns)."})
    target_lang: str = field(default="de", metadata={"help": "Target language code."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training pairs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation pairs."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Use only the first N pairs of each test set."})
    max_source_length: int = field(default=128, metadata={
        "help": "Sources are truncated to this many tokens, in training, evaluation and test predictions; saved as "
                "the tokenizer's model_max_length, where translation cuts them too."})
    max_target_length: int = field(default=128, metadata={"help": "Targets are truncated to this many tokens."})
    annotator: str = field(default="stanza", metadata={
        "help": "What parses raw sources: stanza (default) or spacy (with --spacy_model). A new tokenizer records it "
                "to parse raw text at translation, also when every source comes parsed (name the parser that made the "
                "parses); a given tokenizer must have been built with the same one (without this option, its own "
                "parses)."})
    spacy_model: str | None = field(default=None, metadata={
        "help": "spaCy pipeline package or folder for --annotator spacy, e.g. fr_core_news_sm."})
    stanza_dir: str | None = field(default=None, metadata={
        "help": "Stanza resources folder (default: $HF_SRCFEAT_STANZA_DIR, else Stanza's normal download)."})
    train_source_conllu: str | None = field(default=None, metadata={
        "help": "CoNLL-U parses of the training sources (one sentence per source, in order; .gz read as gzip) from "
                "any parser: used instead of parsing with Stanza."})
    validation_source_conllu: str | None = field(default=None, metadata={
        "help": "CoNLL-U parses of the validation sources (as --train_source_conllu)."})
    test_source_conllu: list[str] | None = field(default=None, metadata={
        "help": "CoNLL-U parses of the test sources (as --train_source_conllu), one file per test set, in the order of "
                "--test_file.", "nargs": "+"})
    preprocessing_num_workers: int | None = field(default=None, metadata={
        "help": "Processes tokenizing the corpus (datasets.map num_proc), as in run_translation.py."})
    annotation_num_proc: int = field(default=1, metadata={
        "help": "Worker processes parsing the sources not yet in the annotation cache (one torch thread each)."})
    annotation_device: str = field(default="cpu", metadata={"help": "Where Stanza parses: cpu, cuda, cuda:N or auto."})
    annotation_cache: str | None = field(default=None, metadata={
        "help": "SQLite file caching the parses (default: $HF_SRCFEAT_ANNOTATION_CACHE, else ~/.cache/hf_srcfeat/annotations.sqlite)."})
    max_train_minutes: float | None = field(default=None, metadata={
        "help": "Stop training after this many minutes (wall clock), whatever max_steps says."})
    max_tokens_per_batch: int | None = field(default=None, metadata={
        "help": "Token-based batching (fairseq --max-tokens): training batches of sentences of similar length holding "
                "at most this many padded tokens (rows x longest of source and target), instead of "
                "per_device_train_batch_size sentences. From scratch, when no batch size is given: the larger of 1024 "
                "and the longest pair the truncation keeps."})
    batch_size_multiple: int = field(default=1, metadata={
        "help": "With --max_tokens_per_batch: sentences per training batch rounded down to a multiple of this "
                "(fairseq --required-batch-size-multiple, Sockeye --batch-sentences-multiple-of), the rest starting "
                "the next batch; fewer sentences than this make a batch only before a sentence longer than "
                "max_tokens_per_batch / batch_size_multiple, and the batch cut last takes what is left."})
    early_stopping_patience: int | None = field(default=None, metadata={
        "help": "Stop after this many evaluations without a better --metric_for_best_model and keep the best "
                "checkpoint (needs --load_best_model_at_end, eval and save every eval_steps); train to convergence "
                "with a large max_steps."})
    length_penalty: float | None = field(default=None, metadata={
        "help": "Beam search's length penalty for evaluation, tests and the saved generation config: scores are "
                "divided by length ** length_penalty (default: Transformers' 1.0; Deps-SAN's paper decodes with "
                "0.6)."})
    no_repeat_ngram_size: int | None = field(default=None, metadata={
        "help": DECODING_OPTIONS["no_repeat_ngram_size"].help + "; for evaluation, tests and the saved generation config"})
    repetition_penalty: float | None = field(default=None, metadata={
        "help": DECODING_OPTIONS["repetition_penalty"].help + "; for evaluation, tests and the saved generation config"})
    early_stopping: bool | None = field(default=None, metadata={  # a switch, as in hf-srcfeat-translate
        "help": DECODING_OPTIONS["early_stopping"].help + "; for evaluation, tests and the saved generation config "
                "(not training's --early_stopping_patience)", "nargs": "?", "const": True})
    do_sample: bool | None = field(default=None, metadata={  # a switch, as in hf-srcfeat-translate (or true/false)
        "help": DECODING_OPTIONS["do_sample"].help + " (evaluation and tests; BLEU then varies with the seed)",
        "nargs": "?", "const": True})
    top_k: int | None = field(default=None, metadata={"help": DECODING_OPTIONS["top_k"].help})
    top_p: float | None = field(default=None, metadata={"help": DECODING_OPTIONS["top_p"].help})
    temperature: float | None = field(default=None, metadata={"help": DECODING_OPTIONS["temperature"].help})
    average_last_checkpoints: int | None = field(default=None, metadata={
        "help": "After training, the model becomes the average of the weights of the last N checkpoints "
                "(hf-srcfeat-average-checkpoints), which is then saved, evaluated and tested; needs save_strategy "
                "steps and save_total_limit >= N (Xu et al. 2020 average the last 5)."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Allow writing into a non-empty output_dir (otherwise refused, so nothing saved is lost)."})
