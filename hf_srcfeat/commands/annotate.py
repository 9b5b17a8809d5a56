"""`python -m hf_srcfeat.commands.annotate`: parse a corpus ahead of training or translation, into CoNLL-U.

    python -m hf_srcfeat.commands.annotate --input train.en.gz --output train.en.conllu.gz --language en --device cuda
    python -m hf_srcfeat.commands.annotate --input train.en.gz --output train.en.conllu.gz --num_proc 8
    torchrun --nnodes 4 --nproc_per_node 8 ... -m hf_srcfeat.commands.annotate --input train.en.gz --output train.en.conllu.gz

Scaling out: `--num_proc N` parses with N worker processes on this machine. Under `torchrun` or `accelerate
launch` (RANK and WORLD_SIZE set; or `--shard_index/--num_shards` by hand) each process parses every
WORLD_SIZE-th line into `OUTPUT.shard-<rank>-of-<world> (before any .gz)`, and rank 0 merges the shards, in the input's order, into
OUTPUT once all are there (the output folder must be shared between machines), so a multi-node training run reads
finished parses instead of waiting at a barrier.

One sentence per input line, one CoNLL-U sentence per line out, in order (`# text` gives the line), which is what
`hf-srcfeat-train --train_source_conllu`, `hf-srcfeat-translate --input_format conllu` and
`tokenizer(annotations=read_conllu(...))` read. Parses go through the annotation cache as they are made, so a
killed run, started again, parses only what is still missing; the output file appears only when complete. A line
longer than `--max_characters` is parsed in pieces cut at spaces, joined into one tree at their roots, and reported
with its line number, so that the output keeps one sentence per input line.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from hf_srcfeat.annotated_sentence import AnnotatedSentence
from hf_srcfeat.annotation_cache import AnnotationCacheError, check_cache_path
from hf_srcfeat.annotator import AnnotatorLoadError, join_pieces, split_long_text
from hf_srcfeat.annotators import ANNOTATORS, make_annotator
from hf_srcfeat.commands import check_counts, resolve_device, used_cache_path
from hf_srcfeat.conllu import read_conllu, write_conllu_lines
from hf_srcfeat.data.corpora import numbered_lines, single_line
from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import overwritten_input, replaced_atomically, write_json_atomically

#: Seconds shard 0 waits for the others before giving up, and between its messages about the wait.
DEFAULT_MERGE_TIMEOUT = 2 * 3600
WAIT_MESSAGE_EVERY = 60.0


def read_sentences(path: str) -> list[str]:
    """The input's lines, split at line feeds only: a carriage return inside a line would otherwise start a new
    sentence and shift every later parse (an error naming the line); UTF-8, truncated gzip and a byte-order mark
    handled as for corpora."""
    try:
        lines = [single_line(line, Path(path), number) for number, line in numbered_lines(Path(path))]
    except ValueError as error:
        raise SystemExit(f"hf-srcfeat-annotate: {error}") from None
    if not lines:
        raise SystemExit(f"hf-srcfeat-annotate: {path} holds no sentence (an empty file); nothing to parse.")
    empty = [number for number, line in enumerate(lines, start=1) if not line.strip()]
    if empty:
        raise SystemExit(f"hf-srcfeat-annotate: {path} line {empty[0]} is empty ({len(empty)} empty lines): a parse "
                         "needs a sentence.")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf-srcfeat-annotate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="one sentence a line (.gz read as gzip)")
    parser.add_argument("--output", required=True, help="CoNLL-U file to write (.gz written as gzip)")
    parser.add_argument("--language", default=None,
                        help="language of the input: Stanza's models for it (default en); a spaCy pipeline must match")
    parser.add_argument("--annotator", choices=list(ANNOTATORS), default="stanza",
                        help="the parser: Stanza (default) or a spaCy pipeline (--spacy_model)")
    parser.add_argument("--spacy_model", default=None, help="spaCy pipeline package or folder, e.g. fr_core_news_sm")
    parser.add_argument("--stanza_dir", default=None,
                        help="Stanza resources folder (default: $HF_SRCFEAT_STANZA_DIR, else Stanza's download)")
    parser.add_argument("--device", default="cpu",
                        help="where Stanza runs: cpu (default), cuda, cuda:N or auto (cuda when there is one)")
    parser.add_argument("--annotation_cache", default=None,
                        help="SQLite parse cache (default: $HF_SRCFEAT_ANNOTATION_CACHE, else "
                             "~/.cache/hf_srcfeat/annotations.sqlite)")
    parser.add_argument("--batch_size", type=int, default=256, help="sentences handed to Stanza at once (default 256)")
    parser.add_argument("--max_characters", type=int, default=10000,
                        help="longest text handed to the parser at once; a longer line is parsed in pieces joined "
                             "into one tree (default 10000)")
    parser.add_argument("--num_proc", type=int, default=1, help="worker processes on this machine (default 1)")
    parser.add_argument("--shard_index", type=int, default=None, help="this shard (default: $RANK, else 0)")
    parser.add_argument("--num_shards", type=int, default=None, help="shards in all (default: $WORLD_SIZE, else 1)")
    parser.add_argument("--merge_timeout", type=float, default=DEFAULT_MERGE_TIMEOUT,
                        help="seconds shard 0 waits for the other shards before giving up (default two hours)")
    parser.add_argument("--report_json", default=None, help=(
        "write the counts and the time to this JSON file (sharded: each shard to NAME.shard-<rank>-of-<world>.json)"))
    args = parser.parse_args(argv)
    shard = args.shard_index if args.shard_index is not None else int(os.environ.get("RANK", 0))
    shards = args.num_shards if args.num_shards is not None else int(os.environ.get("WORLD_SIZE", 1))
    if not 0 <= shard < shards:
        given = [f"--shard_index {shard}" if args.shard_index is not None else f"RANK={shard}",
                 f"--num_shards {shards}" if args.num_shards is not None else
                 f"WORLD_SIZE={shards}" if "WORLD_SIZE" in os.environ else "1 shard"]
        parser.error(f"shard {shard} of {shards} does not exist ({', '.join(given)}); shards count from 0.")
    check_counts(parser, args, ("batch_size", "num_proc", "max_characters"))
    args.device = resolve_device(args.device)
    problem = overwritten_input({"--output": args.output, "--report_json": args.report_json},
                                {"input": args.input, "annotation cache": used_cache_path(args)})
    if problem:
        parser.error(problem)
    if "-" in (args.input, args.output):
        parser.error("--input and --output are files (a run resumes through the parse cache and shards merge into "
                     "the output): give paths, not - for stdin or stdout.")
    if Path(args.output).is_dir():
        parser.error(f"--output {args.output} is a folder; name a file.")
    if not Path(args.input).is_file():
        parser.error(f"--input {args.input}: {'a folder' if Path(args.input).is_dir() else 'no such file'}; "
                     "give a file of one sentence a line.")
    try:
        check_cache_path(used_cache_path(args))
    except ValueError as error:
        parser.error(f"--annotation_cache: {error}")
    lines = read_sentences(args.input)
    sentences = lines[shard::shards]
    model = args.spacy_model if args.annotator == "spacy" else args.stanza_dir

    def new_annotator(**cache_options):
        return make_annotator(args.annotator, language=args.language, model=model, device=args.device,
                              batch_size=args.batch_size, max_characters=args.max_characters, **cache_options)

    try:
        annotator = new_annotator(cache_path=args.annotation_cache)
    except ValueError as error:
        parser.error(str(error))
    except (FileNotFoundError, AnnotatorLoadError) as error:  # no models where they were looked for
        raise SystemExit(f"hf-srcfeat-annotate: {error}") from None
    start = time.perf_counter()
    target = args.output if shards == 1 else shard_path(args.output, shard, shards)
    long_lines: list[tuple[int, int, int]] = []
    try:
        # A shard names its parser (whose identity may load it) and its lines: rank 0 merges only this run's shards.
        comments = [shard_comment(annotator.identity, sentences)] if shards > 1 else []
        try:
            count = write_atomically(annotate_lines(annotator, sentences, shard, shards, args, long_lines), target,
                                     comments)
        except AnnotationCacheError as error:
            # The cache file, not a sentence, is at fault: said once, and this run parses without it.
            print(f"hf-srcfeat-annotate: {error}\nhf-srcfeat-annotate: parsing without the annotation cache for "
                  "this run.", file=sys.stderr)
            annotator.close()
            annotator = new_annotator(use_cache=False)
            long_lines.clear()
            count = write_atomically(annotate_lines(annotator, sentences, shard, shards, args, long_lines), target,
                                     comments)
    except AnnotatorLoadError as error:  # the models are there but do not load: nothing can be parsed
        raise SystemExit(f"hf-srcfeat-annotate: {error}") from None
    except KeyboardInterrupt:
        resumes = " The same command resumes: the sentences parsed so far are in the annotation cache." \
            if annotator.cache is not None else ""
        print(f"hf-srcfeat-annotate: interrupted; nothing was written.{resumes}", file=sys.stderr)
        return 130
    finally:
        annotator.close()
    for line, characters, pieces in long_lines:
        print(f"hf-srcfeat-annotate: {args.input} line {line} has {characters:,} characters, more than the parser "
              f"takes at once ({annotator.max_characters:,}): parsed in {pieces} pieces cut at spaces, joined into "
              "one tree at their roots.", file=sys.stderr)
    seconds = time.perf_counter() - start
    print(f"annotate: {count} sentences of {args.input} (shard {shard} of {shards}) parsed into {target} in "
          f"{seconds:.1f} s ({count / max(seconds, 1e-9):.1f} sentences/s, cached ones included)", file=sys.stderr)
    if shards > 1 and shard == 0:
        merge_shards(args.output, shards, args.merge_timeout, lines, args.input, annotator.identity)
    if args.report_json:
        # Each shard reports its own part, beside the others' (as its parses are written).
        named = Path(args.report_json)
        report = named if shards == 1 else named.with_name(f"{named.stem}.shard-{shard}-of-{shards}{named.suffix}")
        write_json_atomically(report, {
            "code_version": code_version(), "input": args.input, "output": target, "language": annotator.language,
            "annotator": args.annotator, "batch_size": args.batch_size, "sentences": count,
            "seconds": round(seconds, 2), "num_proc": args.num_proc,
            "shard": shard, "num_shards": shards, "device": args.device, "annotator_identity": annotator.identity,
            "long_lines": [{"line": line, "characters": characters, "pieces": pieces}
                           for line, characters, pieces in long_lines],
            "sentences_per_second": round(count / max(seconds, 1e-9), 1)})
    return 0


#: Lines parsed and written at a time: a corpus of any size is never held parsed whole.
CHUNK_LINES = 50_000


def annotate_lines(annotator, sentences: list[str], shard: int, shards: int, args: argparse.Namespace,
                   long_lines: list[tuple[int, int, int]]) -> Iterator[AnnotatedSentence]:
    """One parse per line, in order, parsed CHUNK_LINES lines at a time. A line longer than the parser takes at
    once is parsed in pieces joined into one tree, so that the output stays one sentence per input line; those
    lines are added to `long_lines` as (input line number, characters, pieces)."""
    limit = annotator.max_characters
    for start in range(0, len(sentences), CHUNK_LINES):
        chunk = sentences[start:start + CHUNK_LINES]
        pieces = [split_long_text(text, limit) if len(text) > limit else [text] for text in chunk]
        # The parser's progress bar (of the sentences not yet cached), one for each chunk
        parsed = iter(annotator.annotate([piece for line in pieces for piece in line], show_progress=shard == 0,
                                         num_proc=args.num_proc))
        for index, (text, line) in enumerate(zip(chunk, pieces, strict=True), start=start):
            parts = [next(parsed) for _ in line]
            if len(line) == 1:
                yield parts[0]
                continue
            long_lines.append((shard + index * shards + 1, len(text), len(line)))
            yield join_pieces(text, parts)


def shard_path(output: str, shard: int, shards: int) -> str:
    """`train.en.conllu.gz` -> `train.en.conllu.shard-0-of-4.gz` (the compression suffix stays last)."""
    stem, gz = (output[:-3], ".gz") if output.endswith(".gz") else (output, "")
    return f"{stem}.shard-{shard}-of-{shards}{gz}"


def write_atomically(parses, target: str, comments: Sequence[str] = ()) -> int:
    """Write whole or not at all (hf_srcfeat.safe_writing), so a file that exists is complete."""
    with replaced_atomically(target) as handle:
        return write_conllu_lines(parses, handle, comments)


#: The first line of a shard file: which parser and which lines of the input it holds.
SHARD_COMMENT = "# hf_srcfeat_shard = "


def shard_comment(annotator_identity: str, lines: Sequence[str]) -> str:
    """The first line of the shard of `lines` parsed by the annotator of that identity: a shard left by an earlier
    run (another input, another parser) has another, and is not merged."""
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    return f"{SHARD_COMMENT}annotator {annotator_identity} lines {digest}"


def first_line(path: str) -> str:
    """The file's first line; empty for a file that is not readable text (not one of this run's shards)."""
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else
              open(path, encoding="utf-8")) as handle:
            return handle.readline().rstrip("\n")
    except (OSError, EOFError, UnicodeDecodeError):
        return ""


def merge_shards(output: str, shards: int, timeout: float, lines: list[str], input_name: str,
                 annotator_identity: str) -> None:
    """Wait for every shard file of this run (its first line names the parser and the lines it holds: a shard left
    by an earlier run is waited on until its rank writes it again), check that each holds the parses of its lines of
    the input (`lines`, read from `input_name`), then write them interleaved back into the input's order (shard k
    holds lines k, k + shards, ...), and remove the shards."""
    paths = [shard_path(output, shard, shards) for shard in range(shards)]
    expected = {path: shard_comment(annotator_identity, lines[shard::shards]) for shard, path in enumerate(paths)}
    started = time.monotonic()
    last_said = -WAIT_MESSAGE_EVERY
    while missing := [path for path in paths if not Path(path).exists() or first_line(path) != expected[path]]:
        waited = time.monotonic() - started
        if waited > timeout:
            earlier = [path for path in missing if Path(path).exists()]
            raise SystemExit(f"annotate: shards {missing} did not appear within {timeout:.0f} s; not merging "
                             + (f"({', '.join(earlier)}: of another input or parser, left by an earlier run; this "
                                "run's rank writes it again) " if earlier else "")
                             + "(are the other ranks running? a stray WORLD_SIZE in the environment starts a sharded "
                             "run; --num_shards 1 parses everything here).")
        if waited - last_said >= WAIT_MESSAGE_EVERY:  # say what the wait is for, now and then
            print(f"annotate: waiting for {len(missing)} of {shards} shards ({', '.join(missing)}); giving up after "
                  f"{timeout:.0f} s (--merge_timeout).", file=sys.stderr, flush=True)
            last_said = waited
        time.sleep(min(2.0, max(timeout - waited, 0.05)))
    readers = [read_conllu(path) for path in paths]
    write_atomically(checked_shard_parses(readers, paths, lines, input_name), output)
    for path in paths:
        Path(path).unlink()


def checked_shard_parses(readers: list[Iterator[AnnotatedSentence]], paths: list[str], lines: list[str],
                         input_name: str) -> Iterator[AnnotatedSentence]:
    """The shards' parses interleaved back into the input's order, each checked against its line: a shard left by
    a run over another input (or cut short) would otherwise be merged into a complete-looking output of other
    sentences."""
    shards = len(readers)

    def stale(shard: int, reason: str) -> SystemExit:
        return SystemExit(f"annotate: {paths[shard]} {reason} (a shard of another run? delete it and parse shard "
                          f"{shard} again; nothing was merged).")

    for index, line in enumerate(lines):
        shard = index % shards
        parse = next(readers[shard], None)
        if parse is None:
            raise stale(shard, f"holds {index // shards} parses, but shard {shard} of {input_name} has "
                               f"{len(lines[shard::shards])} lines")
        if parse.text and parse.text.split() != line.split():
            raise stale(shard, f"parse {index // shards + 1} is of {parse.text[:60]!r}, but {input_name} line "
                               f"{index + 1} is {line[:60]!r}")
        yield parse
    for shard, reader in enumerate(readers):
        if next(reader, None) is not None:
            raise stale(shard, f"holds more parses than shard {shard} of {input_name} has lines "
                               f"({len(lines[shard::shards])})")


if __name__ == "__main__":
    sys.exit(main())
