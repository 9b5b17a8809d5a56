"""Entry points of the installed training commands. `-h`/`--help` answers from the arguments modules without
loading torch: the command's own options, and where Seq2SeqTrainingArguments' are (`--help_all` lists them too:
Transformers' training arguments import torch, seconds on a CPU machine). Anything else runs the command."""

from __future__ import annotations

import sys
from collections.abc import Callable

from hf_srcfeat.commands.pretrain_dae_arguments import DaeArguments
from hf_srcfeat.commands.train_arguments import HELP_ALL, DataArguments, ModelArguments


def quick_help(prog: str, description: str, argument_classes: tuple) -> str:
    """`--help` of a training command: its own options, then where the training options are."""
    from transformers import HfArgumentParser  # its module loads neither torch nor the models

    parser = HfArgumentParser(argument_classes, prog=prog, usage=f"{prog} [--config FILE] [options]",
                              description=description, epilog=trainer_options_note(prog))
    return parser.format_help()


def trainer_options_note(prog: str) -> str:
    return ("Training options: every Seq2SeqTrainingArguments option works as well (--output_dir, --do_train, "
            "--max_steps, --learning_rate, --per_device_train_batch_size, --eval_strategy, --save_steps, --seed, "
            f"--use_cpu, ...); `{prog} {HELP_ALL}` lists them with Transformers' descriptions. A recipe (`--config "
            "FILE`, JSON or YAML) gives any option as a mapping; flags beside it override its values.")


def help_or_run(run: Callable[[], int], prog: str, description: str, argument_classes: tuple) -> int:
    """A training command's console script: `-h`/`--help` answers at once, anything else is `run()`."""
    arguments = sys.argv[1:]
    if any(argument in ("-h", "--help") for argument in arguments) and HELP_ALL not in arguments \
            and "--help_model" not in arguments:
        print(quick_help(prog, description, argument_classes))
        return 0
    return run()


#: `hf-srcfeat-train --help`'s summary; the values are `train.FROM_SCRATCH_DEFAULTS`' (not imported: the help
#: comes without torch).
TRAIN_DESCRIPTION = ("Train a source-feature translation model with Seq2SeqTrainer, on Multi30k or your own corpus. "
                     "`--help_model TYPE` lists a model type's settings. From scratch, the Trainer options not given "
                     "take the recipes' values instead of Transformers' defaults: learning rate 1e-3, inverse square "
                     "root schedule, 400 warm-up steps, Adam beta2 0.98, and token batches (--max_tokens_per_batch) "
                     "unless a batch size is given.")


def train() -> int:
    """`hf-srcfeat-train`."""
    def run() -> int:
        from hf_srcfeat.commands import train as command

        return command.cli()

    return help_or_run(run, "hf-srcfeat-train", TRAIN_DESCRIPTION, (ModelArguments, DataArguments))


def pretrain_dae() -> int:
    """`hf-srcfeat-pretrain-dae`."""
    def run() -> int:
        from hf_srcfeat.commands import pretrain_dae as command

        return command.cli()

    return help_or_run(run, "hf-srcfeat-pretrain-dae", "Pre-train a latent feature encoder as a denoising "
                       "autoencoder (Li, Li & Zhang 2021, Section 3).", (DaeArguments,))
