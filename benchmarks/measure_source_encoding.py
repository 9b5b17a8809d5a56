#!/usr/bin/env python
"""What the translate path spends encoding one parsed source: the pipeline's per-sentence tokenizer call, for a
model that reads no tree distances (no tree is built), for one that does (the [S, S] `dep_distance` built from
the words' heads as an array), and the matrix built as nested Python lists as the tokenizer used to.

    python -m benchmarks.measure_source_encoding --output benchmarks/results/source_encoding.json

Sources: the first `--sentences` Multi30k test_2016_flickr sources, one at a time (as the pipeline encodes), and
one long source of about `--long_tokens` tokens (those parses joined into one tree). The paths alternate within
each of `--rounds` rounds; the median round is reported. Writes JSON (with the code version).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--long_tokens", type=int, default=1085)
    parser.add_argument("--train_pairs", type=int, default=2000, help="pairs the tokenizer is trained on")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data_dir", default=None, help="Multi30k folder (default: $HF_SRCFEAT_MULTI30K_DIR)")
    parser.add_argument("--stanza_dir", default=None, help="Stanza resources (default: $HF_SRCFEAT_STANZA_DIR)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()

    import torch
    from transformers import BatchEncoding

    from hf_srcfeat.annotator import join_pieces
    from hf_srcfeat.annotator_stanza import StanzaAnnotator
    from hf_srcfeat.commands.train import code_version
    from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file
    from hf_srcfeat.provenance import processor_name
    from hf_srcfeat.safe_writing import write_json_atomically
    from hf_srcfeat.tokenization_source_features import train_source_feature_tokenizer

    torch.set_num_threads(1)
    annotator = StanzaAnnotator(model_dir=args.stanza_dir)
    train = load_multi30k("train", "en", "de", args.data_dir, args.train_pairs)
    tokenizer = train_source_feature_tokenizer(list(train["source"]), list(train["target"]), vocab_size=8000,
                                               source_annotations=annotator.annotate(list(train["source"])))
    sources = list(load_multi30k("test_2016_flickr", "en", "de", args.data_dir, args.sentences)["source"])
    parsed = annotator.annotate(sources)
    lengths = [len(tokenizer(annotations=sentence)["input_ids"]) for sentence in parsed]
    count, tokens = 0, 0
    while tokens < args.long_tokens and count < len(parsed):
        tokens, count = tokens + lengths[count], count + 1
    long_source = join_pieces(" ".join(sources[:count]), parsed[:count])

    def no_tree(sentence):
        return tokenizer(annotations=sentence, return_tensors="pt", return_dep_distance=False,
                         return_word_heads=False)

    def tree_as_array(sentence):
        return tokenizer(annotations=sentence, return_tensors="pt")

    def tree_as_lists(sentence):  # the matrix as lists, padded and turned into a tensor as the tokenizer used to
        row = tokenizer.pad(tokenizer.encode_annotated([sentence], dep_distance=True)[0], padding=False)
        return BatchEncoding(dict(row), tensor_type="pt", prepend_batch_axis=True)

    paths = {"no_tree (a model that reads no distances)": no_tree, "tree_as_array (Deps-SAN)": tree_as_array,
             "tree_as_nested_lists (before)": tree_as_lists}
    reference = tree_as_lists(long_source)["dep_distance"]
    assert torch.equal(tree_as_array(long_source)["dep_distance"], reference)
    cases = {f"{len(parsed)} test sources, one at a time": parsed, f"one source of {sum(lengths[:count])} tokens "
             f"({count} sentences joined into one tree)": [long_source]}
    results: dict = {"code_version": code_version(), "cpu": processor_name(),
                     "torch_threads": 1, "data_files": [str(multi30k_file("test_2016_flickr", "en", args.data_dir))],
                     "rounds": args.rounds, "milliseconds_per_sentence": {}}
    for case, sentences in cases.items():
        times: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.rounds):
            for name, encode in paths.items():
                start = time.perf_counter()
                for sentence in sentences:
                    encode(sentence)
                times[name].append(1000 * (time.perf_counter() - start) / len(sentences))
        results["milliseconds_per_sentence"][case] = {name: round(statistics.median(values), 3)
                                                      for name, values in times.items()}
        write_json_atomically(args.output, results)
        print(case, results["milliseconds_per_sentence"][case], flush=True)


if __name__ == "__main__":
    main()
