"""`import hf_srcfeat` and the commands' `--help` load neither torch nor Transformers, yet importing the package
still puts the zoo's model types into Transformers' Auto classes and `pipeline`, whatever the import order."""

import subprocess
import sys
import textwrap

import pytest


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", textwrap.dedent(code)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_importing_the_package_loads_neither_torch_nor_transformers():
    output = run_python("""
        import sys
        import hf_srcfeat
        print(sorted(name for name in ("torch", "transformers", "datasets", "stanza") if name in sys.modules))
        print(hf_srcfeat.__version__)
    """)
    assert output.splitlines()[0] == "[]"


def test_a_submodule_is_an_attribute_of_the_package_after_import():
    output = run_python("""
        import hf_srcfeat
        print(hf_srcfeat.quantization.quantize_linear_layers.__name__, hf_srcfeat.linear.__name__)
        try:
            hf_srcfeat.no_such_module
        except AttributeError as error:
            print(error)
        print(getattr(hf_srcfeat, "no.such.module", "default"))
    """)
    assert output.splitlines() == ["quantize_linear_layers hf_srcfeat.linear",
                                   "module 'hf_srcfeat' has no attribute 'no_such_module'", "default"]


@pytest.mark.parametrize("command", ["translate", "annotate", "score", "export_ct2", "average_checkpoints", "publish"])
def test_help_of_a_command_loads_no_torch(command):
    output = run_python(f"""
        import contextlib, io, sys
        from hf_srcfeat.commands.{command} import main
        with contextlib.redirect_stdout(io.StringIO()) as help_text, contextlib.suppress(SystemExit):
            main(["--help"])
        print("usage:" in help_text.getvalue(), "torch" in sys.modules)
    """)
    assert output.split() == ["True", "False"]


@pytest.mark.parametrize("command", ["train", "pretrain_dae"])
def test_help_of_a_training_command_lists_its_options_without_torch_and_points_to_the_trainer_options(command):
    output = run_python(f"""
        import contextlib, io, sys
        from hf_srcfeat.commands.console_scripts import {command}
        sys.argv = ["prog", "--help"]
        with contextlib.redirect_stdout(io.StringIO()) as help_text:
            {command}()
        text = " ".join(help_text.getvalue().split())
        print("--max_train_samples" in text, "--help_all` lists them" in text, "torch" in sys.modules)
    """)
    assert output.split() == ["True", "True", "False"]


def test_the_training_commands_help_states_the_trainer_defaults_it_applies_from_scratch():
    from hf_srcfeat.commands import console_scripts, train

    stated = {"learning_rate": (1e-3, "learning rate 1e-3"), "warmup_steps": (400, "400 warm-up steps"),
              "lr_scheduler_type": ("inverse_sqrt", "inverse square root schedule"),
              "adam_beta2": (0.98, "Adam beta2 0.98")}
    for name, (value, phrase) in stated.items():
        assert train.FROM_SCRATCH_DEFAULTS[name] == value and phrase in console_scripts.TRAIN_DESCRIPTION, name


def test_help_all_lists_the_trainers_options_too(capsys):
    from hf_srcfeat.commands import train

    with pytest.raises(SystemExit) as stopped:
        train.parse_arguments(["--help_all"])
    text = capsys.readouterr().out
    assert stopped.value.code == 0
    assert "--learning_rate" in text and "--max_train_samples" in text


def test_the_model_types_known_without_importing_a_model_are_the_registered_ones():
    from hf_srcfeat.auto_registration import MODEL_TYPES, config_classes

    assert list(MODEL_TYPES) == [config_class.model_type for config_class in config_classes()]


CHECK_REGISTERED = """
    from transformers import AutoConfig, AutoModelForSeq2SeqLM
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING
    from transformers.pipelines import PIPELINE_REGISTRY

    config = AutoConfig.for_model("deps_san", vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
                                  decoder_ffn_dim=16)
    print(type(AutoModelForSeq2SeqLM.from_config(config)).__name__)
    tokenizer_class = TOKENIZER_MAPPING[type(config)]
    print((tokenizer_class if isinstance(tokenizer_class, type) else tokenizer_class[0]).__name__)
    print("source-feature-translation" in PIPELINE_REGISTRY.get_supported_tasks())
"""


@pytest.mark.parametrize("imports", [
    "from transformers import AutoModelForSeq2SeqLM\nimport hf_srcfeat\n",  # Transformers first
    "import hf_srcfeat\nfrom transformers import AutoModelForSeq2SeqLM\n",  # the Auto classes load afterwards
    # the Auto modules load in the middle of Transformers' modeling_utils, the trainer's import
    "import hf_srcfeat\nfrom transformers import Seq2SeqTrainer\n",
    "import hf_srcfeat\nfrom hf_srcfeat import DepsSanConfig\n",  # the package's own modules import Transformers
], ids=["transformers-first", "auto-after", "trainer-after", "own-module-after"])
def test_importing_the_package_registers_the_model_types_in_any_import_order(imports):
    output = run_python(imports + textwrap.dedent(CHECK_REGISTERED))
    assert output.split() == ["DepsSanForConditionalGeneration", "SourceFeatureTokenizer", "True"]
