"""The installed commands (`hf-srcfeat-train`, `hf-srcfeat-annotate`, `hf-srcfeat-translate`, `hf-srcfeat-export-ct2`,
`hf-srcfeat-publish`, `hf-srcfeat-pretrain-dae`): each module's `main(argv)` is one command."""
