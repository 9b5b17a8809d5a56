"""`python -m hf_srcfeat.annotate`: parse a corpus ahead of training or translation, into CoNLL-U.

    python -m hf_srcfeat.annotate --input train.en.gz --output train.en.conllu.gz --language en --device cuda

One sentence per input line, one CoNLL-U sentence per line out, in order (`# text` gives the line), which is what
`training/train.py --train_source_conllu`, `hf-srcfeat-translate --input_format conllu` and
`tokenizer(annotations=read_conllu(...))` read. Parses go through the annotation cache as they are made, so a
killed run, started again, parses only what is still missing; the output file appears only when complete.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from pathlib import Path

from .annotation import StanzaAnnotator, write_conllu


def read_sentences(path: str) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\r\n") for line in handle]
    empty = [number for number, line in enumerate(lines, start=1) if not line.strip()]
    if empty:
        raise SystemExit(f"{path} line {empty[0]} is empty ({len(empty)} empty lines): a parse needs a sentence.")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hf_srcfeat.annotate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="one sentence a line (.gz read as gzip)")
    parser.add_argument("--output", required=True, help="CoNLL-U file to write (.gz written as gzip)")
    parser.add_argument("--language", default="en", help="Stanza language code (default en)")
    parser.add_argument("--stanza_dir", default=None,
                        help="Stanza resources folder (default: $HF_SRCFEAT_STANZA_DIR, else Stanza's download)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda: where Stanza runs")
    parser.add_argument("--annotation_cache", default=None,
                        help="SQLite parse cache (default: $HF_SRCFEAT_ANNOTATION_CACHE, else ~/.cache/hf_srcfeat)")
    parser.add_argument("--batch_size", type=int, default=256, help="sentences handed to Stanza at once")
    args = parser.parse_args(argv)
    if Path(args.output).resolve() == Path(args.input).resolve():
        parser.error(f"--output {args.output} is the input file; it would be overwritten.")
    sentences = read_sentences(args.input)
    annotator = StanzaAnnotator(language=args.language, model_dir=args.stanza_dir, cache_path=args.annotation_cache,
                                batch_size=args.batch_size, device=args.device)
    start = time.perf_counter()
    parses = annotator.annotate(sentences, show_progress=True)
    seconds = time.perf_counter() - start
    partial = Path(args.output).with_name(Path(args.output).name + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    count = write_conllu(parses, partial, compress=args.output.endswith(".gz"))
    os.replace(partial, args.output)
    print(f"annotate: {count} sentences of {args.input} parsed into {args.output} in {seconds:.1f} s "
          f"({count / max(seconds, 1e-9):.1f} sentences/s, cached ones included)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
