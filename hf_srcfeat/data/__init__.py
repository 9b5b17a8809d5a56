"""Corpora and batches: reading parallel corpora (files, `datasets`, Multi30k), user factors, token batching."""
