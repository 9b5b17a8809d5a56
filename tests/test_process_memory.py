"""The commands keep freed memory in their process for reuse (`hf_srcfeat.process_memory`): activations allocated
again every step come from memory already mapped instead of a page fault for every 4 KB (measured by
`benchmarks/batching_efficiency.py`, which records each arm's time in the kernel)."""

from __future__ import annotations

import pytest

from hf_srcfeat import process_memory
from hf_srcfeat.commands import pretrain_dae, train, translate


@pytest.mark.skipif(not process_memory.is_glibc(), reason="sets glibc's malloc")
def test_glibc_is_told_to_keep_freed_memory(monkeypatch):
    monkeypatch.delenv(process_memory.ENVIRONMENT_VARIABLE, raising=False)
    assert process_memory.keep_freed_memory() is True


def test_the_defaults_stay_when_the_environment_variable_says_so(monkeypatch):
    monkeypatch.setenv(process_memory.ENVIRONMENT_VARIABLE, "0")
    assert process_memory.keep_freed_memory() is False


@pytest.mark.parametrize("command, argv", [
    (train, ["--output_dir", "unused", "--do_train", "--learning_rate", "-1"]),
    (pretrain_dae, ["--output_dir", "unused", "--mask_ratio", "2"]),
    (translate, ["--model", "no-such-model-folder", "--input", "no-such-file"]),
])
def test_the_commands_keep_freed_memory_in_their_process(monkeypatch, command, argv):
    calls = []
    monkeypatch.setattr(command, "keep_freed_memory", lambda: calls.append(command.__name__))
    with pytest.raises((SystemExit, ValueError, OSError)):  # refused arguments: the call comes first
        command.main(argv)
    assert calls == [command.__name__]
