"""The package's layout as a contract: no import cycles, the backbone free of the annotation machinery, every
command installed, the old import paths still working, nothing editing `sys.path`, and recipes as config files
with flags that override them."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "hf_srcfeat"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that `path` imports anywhere in its body (module level or inside functions)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:  # `from pkg import submodule` imports that submodule
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {module for module in found if module in modules}


@pytest.fixture(scope="module")
def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imported_modules(path, set(paths)) for name, path in paths.items()}


def test_the_package_has_no_import_cycle(import_graph):
    # Depth-first search with colours: a grey module met again closes a cycle.
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "grey"
        for target in sorted(import_graph[module]):
            if state.get(target) == "grey":
                cycle = path[path.index(target):] + [target]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if target not in state:
                visit(target, [*path, target])
        state[module] = "black"

    for module in sorted(import_graph):
        if module not in state:
            visit(module, [module])


def imports_of(import_graph: dict[str, set[str]], module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for target in import_graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_the_backbone_imports_no_annotator_and_no_cache(import_graph):
    reached = imports_of(import_graph, "hf_srcfeat.modeling_srcfeat_transformer")
    assert "hf_srcfeat.feature_vocabulary" in reached, "the check follows the backbone's real imports"
    assert not reached & {"hf_srcfeat.annotation_cache", "hf_srcfeat.annotator", "hf_srcfeat.annotator_stanza",
                          "hf_srcfeat.annotator_spacy", "hf_srcfeat.annotators", "hf_srcfeat.annotation"}


def test_one_registry_builds_every_annotator_by_name():
    from hf_srcfeat import ANNOTATORS, SpacyAnnotator, StanzaAnnotator, make_annotator

    assert ANNOTATORS == {"stanza": StanzaAnnotator, "spacy": SpacyAnnotator}
    with pytest.raises(ValueError, match="unknown annotator 'udpipe'; this version of hf_srcfeat knows stanza, spacy"):
        make_annotator("udpipe", language="en")
    with pytest.raises(ValueError, match="the spacy annotator needs a pipeline"):
        make_annotator("spacy", language="fr")
    # The commands choose their annotator through it: none names a backend class itself.
    for path in (PACKAGE / "commands").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "StanzaAnnotator(" not in text and "SpacyAnnotator(" not in text, path


def test_the_stanza_annotator_from_the_registry_parses(stanza_annotator):
    from hf_srcfeat import make_annotator

    annotator = make_annotator("stanza", language="en", model=stanza_annotator.model_dir, use_cache=False)
    assert annotator.identity == stanza_annotator.identity
    assert [word.text for word in annotator("Two dogs play.")[0].words] == ["Two", "dogs", "play", "."]


def test_every_command_is_an_installed_console_script_with_a_callable_entry_point():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"hf-srcfeat-train", "hf-srcfeat-annotate", "hf-srcfeat-translate",
                            "hf-srcfeat-export-ct2", "hf-srcfeat-publish", "hf-srcfeat-pretrain-dae",
                            "hf-srcfeat-average-checkpoints", "hf-srcfeat-score"}
    for script, target in scripts.items():
        module, _, function = target.partition(":")
        assert module.startswith("hf_srcfeat.commands."), script
        assert callable(getattr(importlib.import_module(module), function)), script


@pytest.mark.parametrize("old, new", [
    ("hf_srcfeat.corpora", "hf_srcfeat.data.corpora"), ("hf_srcfeat.multi30k", "hf_srcfeat.data.multi30k"),
    ("hf_srcfeat.batching", "hf_srcfeat.data.batching"), ("hf_srcfeat.user_factors", "hf_srcfeat.data.user_factors"),
    ("hf_srcfeat.evaluation", "hf_srcfeat.metrics.evaluation"),
    ("hf_srcfeat.translation_metric", "hf_srcfeat.metrics.translation_metric"),
    ("hf_srcfeat.translate", "hf_srcfeat.commands.translate"), ("hf_srcfeat.annotate", "hf_srcfeat.commands.annotate"),
])
def test_an_old_import_path_is_the_moved_module(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_the_old_annotation_and_ctranslate2_paths_still_export_their_names():
    from hf_srcfeat import annotation, annotators, conllu, ctranslate2_export
    from hf_srcfeat.commands import export_ct2
    from hf_srcfeat.integrations import ctranslate2

    assert annotation.read_conllu is conllu.read_conllu and annotation.make_annotator is annotators.make_annotator
    assert ctranslate2_export.export is ctranslate2.export and ctranslate2_export.main is export_ct2.main


def test_nothing_in_the_repository_edits_sys_path():
    offenders = [str(path.relative_to(REPO)) for folder in ("hf_srcfeat", "benchmarks", "examples", "training", "tests")
                 for path in (REPO / folder).rglob("*.py")
                 if "sys.path.insert" in path.read_text(encoding="utf-8") and path.name != Path(__file__).name]
    assert offenders == []


@pytest.mark.slow
def test_the_old_script_paths_run_the_installed_commands():
    completed = subprocess.run([sys.executable, str(REPO / "training" / "train.py"), "--help"], capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "--config" in completed.stdout and "--model_type" in completed.stdout


def test_a_recipe_gives_the_arguments_and_flags_beside_it_override_them(tmp_path):
    from hf_srcfeat.commands import train

    recipe = REPO / "examples" / "recipes" / "deps_san_multi30k_en_de.json"
    values = json.loads(recipe.read_text())
    model_args, _, training_args = train.parse_arguments([str(recipe)])
    assert model_args.model_type == values["model_type"] == "deps_san"
    assert training_args.max_steps == values["max_steps"]
    model_args, _, training_args = train.parse_arguments(["--config", str(recipe), "--max_steps", "7",
                                                          "--output_dir", str(tmp_path / "run")])
    assert training_args.max_steps == 7 and training_args.output_dir == str(tmp_path / "run")
    assert model_args.config_overrides == values["config_overrides"], "what no flag overrides comes from the file"


def test_the_multi30k_recipes_train_on_token_batches_as_training_from_scratch_does():
    from hf_srcfeat.commands import train

    recipes = sorted((REPO / "examples" / "recipes").glob("*.json")) + \
        sorted((REPO / "examples" / "recipes" / "pretraining").glob("*.json"))
    assert recipes
    for recipe in recipes:
        values = json.loads(recipe.read_text())
        assert values["max_tokens_per_batch"] == train.FROM_SCRATCH_TOKENS_PER_BATCH, recipe.name
        assert "per_device_train_batch_size" not in values, f"{recipe.name}: a batch size would read as unused"


def test_a_yaml_recipe_reads_like_its_json_and_a_bad_file_is_named(tmp_path):
    from hf_srcfeat.commands import train

    yaml_recipe = tmp_path / "recipe.yaml"
    yaml_recipe.write_text("model_type: deps_san\noutput_dir: runs/yaml\nmax_steps: 12\nlearning_rate: 0.001\n")
    model_args, _, training_args = train.parse_arguments(["--config", str(yaml_recipe)])
    assert (model_args.model_type, training_args.max_steps, training_args.learning_rate) == ("deps_san", 12, 0.001)
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"output_dir": "runs/x", "max_stepz": 3}))
    with pytest.raises(SystemExit, match=r"unknown\.json: unknown argument\(s\) max_stepz"):
        train.parse_arguments([str(unknown)])
    broken = tmp_path / "broken.yaml"
    broken.write_text("model_type: [deps_san\n")
    with pytest.raises(SystemExit, match="broken.yaml is not valid YAML"):
        train.parse_arguments(["--config", str(broken)])
    with pytest.raises(SystemExit, match="must hold a mapping"):
        listed = tmp_path / "listed.json"
        listed.write_text("[1, 2]")
        train.parse_arguments(["--config", str(listed)])


def test_the_deps_san_paper_recipe_decodes_with_the_papers_length_penalty():
    from hf_srcfeat.commands import train

    recipe = train.read_config_file(str(REPO / "examples" / "recipes" / "paper" / "deps_san_wmt16_de_en.json"))
    assert recipe["length_penalty"] == 0.6 and "length_penalty" in train.DataArguments.__dataclass_fields__
    with pytest.raises(SystemExit, match="--length_penalty must be a finite number"):
        train.check_averaging(*train.parse_arguments(["--output_dir", "runs/x", "--length_penalty", "nan"])[1:])


@pytest.mark.parametrize(("script", "command"), [("train.py", "hf-srcfeat-train"),
                                                 ("pretrain_dae.py", "hf-srcfeat-pretrain-dae")])
def test_the_old_script_paths_answer_help_as_the_installed_commands(script, command):
    completed = subprocess.run([sys.executable, str(REPO / "training" / script), "--help"], capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.startswith(f"usage: {command} [--config FILE] [options]")
