"""Train the subword model (BPE, Unigram or whole words, `tokenizers` library) shared by source and target."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from .configuration_srcfeat_transformer import check_choice, check_positive_int

#: Special tokens in id order; the ids match `SrcFeatTransformerConfig`'s defaults.
SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
SUBWORD_MODELS = ("bpe", "unigram", "word")


def build_subword_tokenizer(texts: Iterable[str], vocab_size: int = 8000, model: str = "bpe",
                            min_frequency: int = 2) -> Tokenizer:
    """Train a reversible subword model on `texts` (raw sentences; source and target together for a joint
    vocabulary). Metaspace pre-tokenization keeps the spaces in the tokens, so decoding restores the
    original spacing (needed for detokenized sacreBLEU) and no separator character can collide with text.
    Encodings end with `</s>`; the decoder start token is `<s>`. `model="word"` keeps word forms (punctuation
    split off): the `vocab_size` most frequent words, every other word `<unk>`, as word-level NMT did.
    """
    check_positive_int("vocab_size", vocab_size)
    check_choice("model", model, SUBWORD_MODELS)
    specials = list(SPECIAL_TOKENS.values())
    if model == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
        trainer: trainers.Trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=specials, show_progress=False)
    elif model == "word":
        tokenizer = Tokenizer(models.WordLevel(unk_token=SPECIAL_TOKENS["unk_token"]))
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=specials, show_progress=False)
    else:
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials,
                                          unk_token=SPECIAL_TOKENS["unk_token"], show_progress=False)
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(),
                                                       pre_tokenizers.Punctuation(behavior="isolated")])
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(texts, trainer=trainer)
    eos = SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.token_to_id(eos))]
    )
    return tokenizer


def train_subword_tokenizer(texts: Iterable[str], vocab_size: int = 8000, model: str = "bpe",
                            min_frequency: int = 2, model_max_length: int = 256) -> PreTrainedTokenizerFast:
    """A plain Transformers fast tokenizer around `build_subword_tokenizer` (no source features)."""
    return PreTrainedTokenizerFast(
        tokenizer_object=build_subword_tokenizer(texts, vocab_size, model, min_frequency),
        model_max_length=model_max_length, **SPECIAL_TOKENS,
    )
