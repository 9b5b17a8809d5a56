"""Pages made at build time (mkdocs-gen-files): one page per model from its card template, and the benchmark report
with its plot, so that the site shows exactly what the cards and the result files say."""

import json
import re
from pathlib import Path

import mkdocs_gen_files

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
CARDS = REPO / "hf_srcfeat" / "model_cards"
RESULTS = REPO / "benchmarks" / "results"
#: The page title of each model type, in the order of the Models section.
TITLES = {"srcfeat_transformer": "Transformer baseline", "deps_san": "Deps-SAN", "relevance_features":
          "Relevance-based features", "diverse_input": "Diverse input representation", "phrase_rep":
          "Phrase representations", "latent_feedback": "Latent feature feedback", "srcfeat_composed":
          "Methods combined"}
#: The benchmark systems of each model type (rows of the benchmark table shown on its page).
SYSTEMS = {"srcfeat_transformer": ["baseline"], "deps_san": ["deps_san"],
           "relevance_features": ["relevance_concat", "relevance_self", "relevance_word"],
           "diverse_input": ["fusing_diverse"], "phrase_rep": ["phrase_max_attn_ta"],
           "latent_feedback": ["lfe_dae", "lfe_joint"], "srcfeat_composed": ["relevance_concat+deps_san"]}
BENCHMARK_START, BENCHMARK_END = "<!-- benchmark-results:start -->", "<!-- benchmark-results:end -->"
#: What `<this repository>` reads as for a model type without a published checkpoint.
OWN_MODEL = "path/to/your/model"


def published_repositories() -> dict[str, str]:
    """The zoo's checkpoint of each model type (its best system by mean BLEU), from the publishing registry."""
    registry = RESULTS / "published_models.json"
    entries = json.loads(registry.read_text(encoding="utf-8")) if registry.exists() else []
    best: dict[str, tuple[float, str]] = {}
    for entry in entries:
        results = entry.get("results", {})
        bleu = results.get("mean_over_seeds", {}).get("bleu", results.get("bleu", 0.0))
        if entry["model_type"] not in best or bleu > best[entry["model_type"]][0]:
            best[entry["model_type"]] = (bleu, entry["repo_id"])
    return {model_type: repo_id for model_type, (_, repo_id) in best.items()}


def benchmark_rows(systems: list[str]) -> str:
    """The benchmark table's header and the rows of `systems` (the baseline's too), as the results page has them."""
    page = (DOCS / "results" / "benchmark.md").read_text(encoding="utf-8")
    block = page.split(BENCHMARK_START, 1)[1].split(BENCHMARK_END, 1)[0]
    lines = block.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("| system | seeds |")), None)
    if header is None:
        return ""
    rows = []
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break  # the end of the table
        rows.append(line)
    chosen = [row for row in rows if row.split("|")[1].strip() in ["baseline", *systems]]
    return "\n".join([lines[header], lines[header + 1], *chosen]) if chosen else ""


def results_section(model_type: str, repo_id: str | None) -> str:
    """What the site shows in place of the card's Results section, which publishing fills for one checkpoint."""
    text = ["## Results", "",
            "A published card's Results section is filled by `hf-srcfeat-publish` from the benchmark's or the run's "
            "result files. In the [benchmark](../results/benchmark.md) (Multi30k en→de, test_2016_flickr, beam 4, "
            "the same CPU budget for every system; Δ BLEU and p against the baseline of the same seed):", ""]
    table = benchmark_rows(SYSTEMS[model_type])
    text += [table if table else "No benchmark results yet.", ""]
    if repo_id:
        text += [f"`{repo_id}`, used in the examples above, is this method's checkpoint in the "
                 "[model zoo](../guides/publishing.md#model-zoo) (a local mirror served by a Hub-compatible "
                 "server, `HF_ENDPOINT`); a folder of your own run loads the same way.", ""]
    else:
        text += [f"`{OWN_MODEL}` in the examples above is the folder of your own run (or its Hub id); "
                 "the [model zoo](../guides/publishing.md#model-zoo) has no checkpoint of this model type yet.", ""]
    return "\n".join(text) + "\n"


def card_page(template: str, model_type: str, repo_id: str | None) -> str:
    """The card without its Hub metadata, the example repository filled in and its Results section for the site."""
    _, _, body = template.split("---", 2)
    body = body.replace("<this repository>", repo_id or OWN_MODEL)
    body = re.sub(r"^## Results\n.*?(?=^## )", lambda _: results_section(model_type, repo_id), body,
                  count=1, flags=re.S | re.M)
    return body.lstrip() + (f"\n\n*Model type `{model_type}`; the card template is "
                            f"`hf_srcfeat/model_cards/{model_type}.md`.*\n")


repositories = published_repositories()
for model_type in TITLES:
    with mkdocs_gen_files.open(f"models/{model_type}.md", "w") as page:
        page.write(card_page((CARDS / f"{model_type}.md").read_text(encoding="utf-8"), model_type,
                             repositories.get(model_type)))

with mkdocs_gen_files.open("results/report.md", "w") as page:
    page.write("# Benchmark report\n\n" + (RESULTS / "benchmark_report.md").read_text(encoding="utf-8"))
for plot in ("benchmark_report.png",):
    with mkdocs_gen_files.open(f"results/{plot}", "wb") as image:
        image.write((RESULTS / plot).read_bytes())
