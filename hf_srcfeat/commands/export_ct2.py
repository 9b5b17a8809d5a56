"""`hf-srcfeat-export-ct2`: export a trained model to CTranslate2 for fast CPU/GPU inference.

    hf-srcfeat-export-ct2 runs/my_model runs/my_model-ct2 --quantization int8

What CTranslate2 can express, and how the export maps the model, is `hf_srcfeat.integrations.ctranslate2`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hf_srcfeat.commands import check_model_source, interruptible
from hf_srcfeat.integrations.ctranslate2 import export, overwritten_model


@interruptible
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf-srcfeat-export-ct2", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="trained model folder or Hub id")
    parser.add_argument("output", help="folder for the CTranslate2 model (must not exist or be empty)")
    parser.add_argument("--quantization", choices=["int8", "int8_float16", "int8_bfloat16", "float16", "bfloat16",
                                                   "float32"], default=None,
                        help="weight type of the export (default: the model's float32)")
    parser.add_argument("--force", action="store_true",
                        help="write into a non-empty output folder (an earlier export there is replaced, other files "
                             "kept)")
    args = parser.parse_args(argv)
    check_model_source(args.model, "model")
    output = Path(args.output)
    if output.exists() and not output.is_dir():
        parser.error(f"output {args.output} is a file; name a folder for the CTranslate2 model.")
    problem = overwritten_model(args.model, args.output)
    if problem:
        parser.error(problem)
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        print("hf-srcfeat-export-ct2 needs CTranslate2: pip install 'hf-srcfeat[ctranslate2]'", file=sys.stderr)
        return 2
    try:
        output = export(args.model, args.output, args.quantization, args.force)
    except ValueError as error:
        print(f"hf-srcfeat-export-ct2: {error}", file=sys.stderr)
        return 1
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
