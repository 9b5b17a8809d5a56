"""Shared fixtures: real Multi30k sentences, a subword tokenizer trained on them, tiny model configs."""

from __future__ import annotations

import atexit
import gzip
import os
import shutil
import tempfile
from pathlib import Path

# Nothing in the tests may reach the network: set before anything imports huggingface_hub, which reads these once
# (a Hub lookup would otherwise retry for a minute without a network).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from hf_srcfeat.single_row_products import set_cpu_threads  # noqa: E402

from .helpers import REPO, train_briefly  # noqa: E402

SHARED = Path(os.environ.get("HF_SRCFEAT_SHARED", REPO.parent / "shared"))
MULTI30K = Path(os.environ.get("HF_SRCFEAT_MULTI30K_DIR", SHARED / "data" / "multi30k"))

os.environ["HF_SRCFEAT_MULTI30K_DIR"] = str(MULTI30K)
STANZA_DIR = Path(os.environ.get("HF_SRCFEAT_STANZA_DIR", SHARED / "stanza_resources"))
os.environ["HF_SRCFEAT_STANZA_DIR"] = str(STANZA_DIR)
EWT = SHARED / "data" / "ud_english_ewt"
# The session's caches and data slices live in one folder, removed when the session's process ends (the processes
# the tests start have ended by then).
SESSION_FOLDER = Path(tempfile.mkdtemp(prefix="hf_srcfeat_test_session_"))
atexit.register(shutil.rmtree, SESSION_FOLDER, ignore_errors=True)
# Parses are cached per test session (and shared with the processes the tests start), never in ~/.cache.
os.environ["HF_SRCFEAT_ANNOTATION_CACHE"] = str(Path(tempfile.mkdtemp(dir=SESSION_FOLDER)) / "a.sqlite")
BLIND_SOURCE_LINES = 4


def blind_source_slices() -> Path:
    """The first lines of each real blind test source (sources only: their references are not in this project), so
    that every benchmark run in the tests translates the blind sets in seconds."""
    folder = Path(tempfile.mkdtemp(prefix="blind_", dir=SESSION_FOLDER))
    for source in sorted((SHARED / "data" / "multi30k_blind").glob("*.en.gz")):
        with gzip.open(source, "rt", encoding="utf-8") as handle, \
                gzip.open(folder / source.name, "wt", encoding="utf-8") as target:
            target.writelines(line for _, line in zip(range(BLIND_SOURCE_LINES), handle, strict=False))
    return folder


os.environ["HF_SRCFEAT_MULTI30K_BLIND_DIR"] = str(blind_source_slices())
# datasets' Arrow and map caches per test session too, never in ~/.cache/huggingface.
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="datasets_", dir=SESSION_FOLDER)
# One thread for PyTorch and numpy's BLAS alike: single rows multiply through OpenBLAS, as one-thread decoding does.
set_cpu_threads(1)


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    if not (MULTI30K / "train.en.gz").exists():
        pytest.fail(f"Multi30k not found in {MULTI30K}; set HF_SRCFEAT_SHARED or HF_SRCFEAT_MULTI30K_DIR.")
    return MULTI30K


@pytest.fixture(scope="session")
def ewt_dir() -> Path:
    if not (EWT / "en_ewt-ud-dev.conllu.gz").exists():
        pytest.fail(f"UD English-EWT not found in {EWT}; set HF_SRCFEAT_SHARED.")
    return EWT


@pytest.fixture(scope="session")
def stanza_annotator(tmp_path_factory):
    """The Stanza English pipeline from the shared resources, with a cache private to this test session."""
    from hf_srcfeat.annotator_stanza import StanzaAnnotator

    return StanzaAnnotator(model_dir=STANZA_DIR, cache_path=tmp_path_factory.mktemp("cache") / "a.sqlite")


@pytest.fixture(scope="session")
def train_pairs(multi30k_dir):
    from hf_srcfeat.data.multi30k import load_multi30k

    return load_multi30k("train", data_dir=multi30k_dir, limit=2000)


@pytest.fixture(scope="session")
def test_sentences(multi30k_dir) -> list[str]:
    from hf_srcfeat.data.multi30k import load_multi30k

    return list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=8)["source"])


@pytest.fixture(scope="session")
def subword_tokenizer(train_pairs):
    """A joint en/de BPE tokenizer trained on 2,000 real Multi30k pairs."""
    from hf_srcfeat.subword_training import train_subword_tokenizer

    return train_subword_tokenizer(list(train_pairs["source"]) + list(train_pairs["target"]), vocab_size=1000)


@pytest.fixture
def tiny_config(subword_tokenizer):
    """Factory of 2-layer configs over the real tokenizer's vocabulary."""
    from hf_srcfeat import SrcFeatTransformerConfig

    def make(**overrides) -> SrcFeatTransformerConfig:
        arguments = dict(
            vocab_size=len(subword_tokenizer), d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            dropout=0.0, pad_token_id=subword_tokenizer.pad_token_id, bos_token_id=subword_tokenizer.bos_token_id,
            eos_token_id=subword_tokenizer.eos_token_id, decoder_start_token_id=subword_tokenizer.bos_token_id,
        )
        arguments.update(overrides)
        return SrcFeatTransformerConfig(**arguments)

    return make


@pytest.fixture(scope="session")
def trained_baseline(subword_tokenizer, train_pairs):
    """A 2-layer baseline trained for 250 steps on real Multi30k pairs (a few seconds), in eval mode."""
    from hf_srcfeat import SrcFeatTransformerConfig, SrcFeatTransformerForConditionalGeneration

    tokenizer = subword_tokenizer
    config = SrcFeatTransformerConfig(
        vocab_size=len(tokenizer), d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, dropout=0.1,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(0)
    model = SrcFeatTransformerForConditionalGeneration(config)
    losses = train_briefly(model, tokenizer, train_pairs, steps=250)
    model.generation_config.max_new_tokens = 24
    return model, losses


@pytest.fixture(scope="session")
def model_folder(trained_baseline, feature_tokenizer, tmp_path_factory):
    """The trained baseline saved with the feature-aware tokenizer: a model folder the commands load."""
    model, _ = trained_baseline
    folder = tmp_path_factory.mktemp("model")
    model.save_pretrained(folder)
    feature_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def train_annotations(stanza_annotator, train_pairs):
    """Stanza parses of the first 300 real Multi30k training sources."""
    return stanza_annotator.annotate(list(train_pairs["source"])[:300], show_progress=False)


@pytest.fixture(scope="session")
def feature_tokenizer(subword_tokenizer, train_annotations, stanza_annotator):
    """The feature-aware tokenizer: the shared subword model, feature vocabularies from 300 parsed sources."""
    from hf_srcfeat import FeatureVocabularies, SourceFeatureTokenizer
    from hf_srcfeat.subword_training import SPECIAL_TOKENS

    return SourceFeatureTokenizer(tokenizer_object=subword_tokenizer.backend_tokenizer,
                                  feature_vocabularies=FeatureVocabularies.build(train_annotations),
                                  annotator=stanza_annotator, model_max_length=256, **SPECIAL_TOKENS)


@pytest.fixture(scope="session")
def ewt_dev_sample(ewt_dir):
    """The first 300 gold-annotated UD English-EWT dev sentences."""
    from hf_srcfeat.conllu import read_conllu

    return list(read_conllu(ewt_dir / "en_ewt-ud-dev.conllu.gz"))[:300]
