"""`hf-srcfeat-score`: the log-probability of given translations under a model (forced decoding), as fairseq's
`--score-reference`, `marian-scorer` and `sockeye-score`.

    hf-srcfeat-score --model runs/quickstart --source test.en --target test.de > scores.tsv
    hf-srcfeat-score --model runs/quickstart --source parsed.conllu --source_format conllu --target test.de

One output line per (source, target) pair, aligned with the input: `TOTAL<TAB>PER_TOKEN<TAB>TOKENS`, the natural-log
probability of the target's subwords (with `</s>`) summed, its mean per token, and the token count (a target-language
token the model's generation forces first, NLLB's or mBART-50's, counts 0, as in the translate command's scores).
Sources are parsed as for translation (the model's annotator, through the parse cache), or read from CoNLL-U (one
sentence per target line). A pair that cannot be scored (an empty line, invalid UTF-8) is reported on stderr with its line
number and gives `nan<TAB>nan<TAB>0`, so later lines never shift. The Python function is
`hf_srcfeat.metrics.forced_decoding.score_targets`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import re
import sys
import zlib
from pathlib import Path

from hf_srcfeat.annotated_sentence import AnnotatedSentence
from hf_srcfeat.annotator import AnnotatorLoadError
from hf_srcfeat.commands import (
    check_counts,
    check_model_source,
    error_summary,
    interruptible,
    resolve_device,
    used_cache_path,
)
from hf_srcfeat.commands.translate import (
    PARSER_REMEDY,
    command_annotator,
    open_binary_input,
    read_conllu_sentences,
    read_raw_lines,
    without_transformers_progress_bars,
)
from hf_srcfeat.integrations.ctranslate2 import is_export
from hf_srcfeat.safe_writing import overwritten_input, write_text_atomically


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-srcfeat-score", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", "-m", required=True, help="trained model folder or Hub id")
    parser.add_argument("--tokenizer", help="tokenizer folder or Hub id (default: the model's)")
    parser.add_argument("--source", "-s", required=True, help="source sentences, one a line (.gz read as gzip)")
    parser.add_argument("--target", "-t", required=True,
                        help="target sentences, one a line, aligned with the sources (.gz read as gzip); - for stdin")
    parser.add_argument("--source_format", choices=["text", "conllu"], default="text",
                        help="text: raw sentences parsed on the way; conllu: pre-parsed sentences")
    parser.add_argument("--output", "-o", default="-", help="output file (.gz written as gzip); - or absent: stdout")
    parser.add_argument("--batch_size", type=int, default=32, help="pairs scored at once (default 32)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: cuda if available)")
    parser.add_argument("--annotation_cache", default=None,
                        help="SQLite parse cache (default: $HF_SRCFEAT_ANNOTATION_CACHE, else "
                             "~/.cache/hf_srcfeat/annotations.sqlite)")
    parser.add_argument("--no_annotation_cache", action="store_true", help="parse every line, cache nothing")
    parser.add_argument("--stanza_dir", default=None,
                        help="Stanza resources folder (default: $HF_SRCFEAT_STANZA_DIR, else Stanza's download)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar while the model loads")
    return parser


def read_whole(path: str, option: str, reader) -> list:
    """Every item `reader` reads from the file `option` names; a damaged or fake gzip file is named."""
    with open_binary_input(path, option) as stream:
        try:
            return list(reader(stream))
        except (EOFError, gzip.BadGzipFile, zlib.error) as error:
            raise SystemExit(f"{option} {path} is not a whole gzip file ({error}); a .gz name is read as gzip.") \
                from None


def read_pairs(args: argparse.Namespace) -> list[tuple[int, str | AnnotatedSentence | None, str | None, str | None]]:
    """(target line number, source text or parse, target text, why the pair cannot be scored) for every pair."""
    if args.source == "-":
        raise SystemExit("--source must be a file (the targets may come from stdin).")
    reader = functools.partial(read_conllu_sentences, name=f"--source {args.source}") \
        if args.source_format == "conllu" else read_raw_lines
    sources = read_whole(args.source, "--source", reader)
    targets = read_whole(args.target, "--target", read_raw_lines)
    if len(sources) != len(targets):
        unit = "sentences" if args.source_format == "conllu" else "lines"
        raise SystemExit(f"--source {args.source} has {len(sources)} {unit}, --target {args.target} has "
                         f"{len(targets)} lines; scoring needs one target per source.")
    pairs = []
    for source, target in zip(sources, targets, strict=True):
        problem = (f"source {source.line_number}: {source.error}" if source.error else
                   f"target line {target.line_number}: {target.error}" if target.error else
                   f"source {source.line_number} is empty" if source.is_empty else
                   f"target line {target.line_number} is empty" if not (target.text or "").strip() else None)
        pairs.append((target.line_number, source.sentence or source.text, target.text, problem))
    return pairs


@interruptible
def main(argv: list[str] | None = None) -> int:
    try:
        return score_files(argv)
    except AnnotatorLoadError as error:
        raise SystemExit(f"hf-srcfeat-score: {error}. Nothing can be parsed, so nothing is scored; {PARSER_REMEDY}, "
                         "or give parsed sources (--source_format conllu).") from None


def score_files(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_counts(parser, args, ("batch_size",))
    check_model_source(args.model)
    if is_export(args.model):
        parser.error(f"--model {args.model} is a CTranslate2 export (hf-srcfeat-export-ct2); score with the "
                     "Transformers model it was exported from.")
    if args.output != "-" and Path(args.output).is_dir():
        parser.error(f"--output {args.output} is a folder; name a file.")
    problem = overwritten_input({"--output": args.output}, {"--source": args.source, "--target": args.target,
                                                            "annotation cache": used_cache_path(args)},
                                {"model": args.model, "tokenizer": args.tokenizer})
    if problem:
        parser.error(problem)
    pairs = read_pairs(args)

    from transformers import AutoModelForSeq2SeqLM

    import hf_srcfeat  # noqa: F401  (registers the model classes with the Auto classes)
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer
    from hf_srcfeat.tokenization_source_features import check_tokenizer_matches

    device = resolve_device(args.device)
    name, option = (args.tokenizer, "--tokenizer") if args.tokenizer else (args.model, "--model")
    try:
        tokenizer = load_tokenizer(name)
    except OSError as error:  # not a folder here, and the Hub has no such model or cannot be reached
        raise SystemExit(f"hf-srcfeat-score: {option} {name}: no such folder here, and it does not load from the Hub "
                         f"({error_summary(error)}).") from None
    if not hasattr(tokenizer, "annotate"):
        raise SystemExit(f"{args.tokenizer or args.model}: its tokenizer is a {type(tokenizer).__name__}, not a "
                         "hf_srcfeat SourceFeatureTokenizer; pass --tokenizer with the model's tokenizer folder.")
    if args.source_format == "text":
        tokenizer.annotator = command_annotator(tokenizer, args, device)
    try:
        with without_transformers_progress_bars() if args.quiet else contextlib.nullcontext():
            model = AutoModelForSeq2SeqLM.from_pretrained(args.model).to(device).eval()
    except OSError as error:  # a tokenizer given apart from a model that is not there
        raise SystemExit(f"hf-srcfeat-score: --model {args.model}: no such folder here, and it does not load from "
                         f"the Hub ({error_summary(error)}).") from None
    try:
        check_tokenizer_matches(model.config, tokenizer)
    except ValueError as error:
        raise SystemExit(f"hf-srcfeat-score: {error}") from None
    usable = [pair for pair in pairs if pair[3] is None]
    for line_number, _, _, problem in pairs:
        if problem is not None:
            print(f"hf-srcfeat-score: pair {line_number} not scored: {problem}", file=sys.stderr)
    scores = iter(score_pairs(model, tokenizer, usable, args.batch_size))
    lines = []
    for _, _, _, problem in pairs:
        score = None if problem is not None else next(scores)
        lines.append("nan\tnan\t0" if score is None else f"{score.total:.6f}\t{score.per_token:.6f}\t{score.tokens}")
    text = "".join(line + "\n" for line in lines)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        # Written whole or not at all: an existing file is replaced only by a complete one.
        write_text_atomically(args.output, text)
    return 0


def score_pairs(model, tokenizer, usable: list, batch_size: int) -> list:
    """The scores of the usable pairs, in batches; should a batch fail (a pair longer than the model takes), the
    pairs are scored one by one and only the failing ones, reported by line, get no score (None)."""
    from hf_srcfeat.metrics.forced_decoding import score_targets

    sources = [source or "" for _, source, _, _ in usable]
    targets = [target or "" for _, _, target, _ in usable]
    try:
        return score_targets(model, tokenizer, sources, targets, batch_size=batch_size)
    except ValueError:
        pass
    scores: list = []
    for (line_number, _, _, _), source, target in zip(usable, sources, targets, strict=True):
        try:
            scores += score_targets(model, tokenizer, [source], [target], batch_size=1)
        except ValueError as error:
            # Scored alone, the pair is "pair 0" to the scorer and its source "text 0" to the annotator.
            reason = re.sub(r"^text 0 ", "the source ", re.sub(r"^pair 0 \(counting from 0\): ", "", str(error)))
            print(f"hf-srcfeat-score: pair {line_number} not scored: {reason}", file=sys.stderr)
            scores.append(None)
    return scores


if __name__ == "__main__":
    sys.exit(main())
