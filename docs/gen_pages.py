"""Pages made at build time (mkdocs-gen-files): one page per model from its card template, and the benchmark report
with its plot, so that the site shows exactly what the cards and the result files say."""

from pathlib import Path

import mkdocs_gen_files

REPO = Path(__file__).resolve().parents[1]
CARDS = REPO / "hf_srcfeat" / "model_cards"
RESULTS = REPO / "benchmarks" / "results"
TITLES = {"srcfeat_transformer": "Transformer baseline", "deps_san": "Deps-SAN", "relevance_features":
          "Relevance-based features", "diverse_input": "Diverse input representation", "phrase_rep":
          "Phrase representations", "latent_feedback": "Latent feature feedback", "srcfeat_composed":
          "Methods combined"}


def card_page(template: str, model_type: str) -> str:
    """The card without its Hub metadata; results are filled at publishing time, so the page points to them."""
    _, _, body = template.split("---", 2)
    body = body.replace("<this repository>", f"hf-srcfeat/{model_type.replace('_', '-')}-multi30k-en-de")
    return body.lstrip() + f"\n\n*Model type `{model_type}`; the card template is `hf_srcfeat/model_cards/{model_type}.md`.*\n"


for model_type in TITLES:
    with mkdocs_gen_files.open(f"models/{model_type}.md", "w") as page:
        page.write(card_page((CARDS / f"{model_type}.md").read_text(encoding="utf-8"), model_type))
    mkdocs_gen_files.set_edit_path(f"models/{model_type}.md", f"../hf_srcfeat/model_cards/{model_type}.md")

with mkdocs_gen_files.open("results/report.md", "w") as page:
    page.write("# Benchmark report\n\n" + (RESULTS / "benchmark_report.md").read_text(encoding="utf-8"))
for plot in ("benchmark_report.png",):
    with mkdocs_gen_files.open(f"results/{plot}", "wb") as image:
        image.write((RESULTS / plot).read_bytes())
