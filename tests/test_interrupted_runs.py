"""What a command interrupted part-way (Ctrl-C, a kill, a preemption) leaves, and how the next run treats it: a
checkpoint whose save was cut off is never resumed from."""

from __future__ import annotations

import json

import torch
from safetensors.torch import save_file

from hf_srcfeat.trainer import checkpoint_problem, newest_complete_checkpoint


def write_checkpoint(folder, *, leave_out: tuple[str, ...] = (), cut: str | None = None) -> None:
    folder.mkdir(parents=True)
    files = {"model.safetensors": lambda path: save_file({"weight": torch.zeros(4)}, str(path)),
             "trainer_state.json": lambda path: path.write_text(json.dumps({"global_step": 1})),
             "optimizer.pt": lambda path: torch.save({"state": {}}, path),
             "scheduler.pt": lambda path: torch.save({"last_epoch": 1}, path)}
    for name, write in files.items():
        if name not in leave_out:
            write(folder / name)
    if cut:
        data = (folder / cut).read_bytes()
        (folder / cut).write_bytes(data[:len(data) // 2])


def test_a_checkpoint_cut_off_in_its_save_is_named_and_the_newest_complete_one_is_resumed_from(tmp_path):
    write_checkpoint(tmp_path / "checkpoint-10")
    write_checkpoint(tmp_path / "checkpoint-20", cut="optimizer.pt")
    write_checkpoint(tmp_path / "checkpoint-30", leave_out=("optimizer.pt", "trainer_state.json", "scheduler.pt"))
    write_checkpoint(tmp_path / "checkpoint-40", cut="trainer_state.json")
    (tmp_path / "checkpoint-best-copy").mkdir()  # a user's folder, not the Trainer's
    assert checkpoint_problem(tmp_path / "checkpoint-10") is None
    assert "checkpoint-30 lacks trainer_state.json, optimizer.pt, scheduler.pt" in checkpoint_problem(
        tmp_path / "checkpoint-30")
    newest, skipped = newest_complete_checkpoint(tmp_path)
    assert newest == str(tmp_path / "checkpoint-10")
    assert "trainer_state.json is truncated or damaged" in skipped[0]
    assert "checkpoint-30 lacks" in skipped[1]
    assert "optimizer.pt is truncated or damaged" in skipped[2]
    assert newest_complete_checkpoint(tmp_path / "no_such_run") == (None, [])


def test_overwriting_a_run_removes_its_numbered_checkpoints_and_shards_not_a_users_files_of_like_names(tmp_path):
    from hf_srcfeat.commands.train import clear_previous_run

    for name in ("checkpoint-10", "checkpoint-best-copy"):
        (tmp_path / name).mkdir()
    for name in ("checkpoint-notes.txt", "model-00001-of-00002.safetensors", "model-final.safetensors",
                 "parameters_rank0.json", "parameters_rank_notes.json", "notes.txt"):
        (tmp_path / name).write_text("x")
    removed = clear_previous_run(tmp_path)
    assert sorted(removed) == ["checkpoint-10", "model-00001-of-00002.safetensors", "parameters_rank0.json"]
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "checkpoint-best-copy", "checkpoint-notes.txt", "model-final.safetensors", "notes.txt",
        "parameters_rank_notes.json"]


def test_a_run_interrupted_in_or_after_its_last_checkpoint_resumes_to_the_uninterrupted_model(multi30k_dir, tmp_path):
    from safetensors.torch import load_file

    from hf_srcfeat.commands import train

    from .test_training import TINY

    run = tmp_path / "run"
    common = TINY + ["--output_dir", str(run), "--do_train", "--max_train_samples", "64", "--max_steps", "4",
                     "--per_device_train_batch_size", "8", "--save_strategy", "steps", "--save_steps", "2",
                     "--data_dir", str(multi30k_dir)]
    train.main(common)
    final = load_file(str(run / "model.safetensors"))

    def killed_before_the_final_save() -> None:
        for name in ("model.safetensors", "results.json"):
            (run / name).unlink()

    killed_before_the_final_save()
    (run / "checkpoint-4" / "scheduler.pt").write_bytes(b"PK")  # the newest checkpoint cut off in its save too
    resumed = train.main(common + ["--resume_from_checkpoint", "True"])
    assert resumed["resumed_from"] == str((run / "checkpoint-2").resolve()), "the newest complete checkpoint"
    assert resumed["global_step"] == 4
    assert all(torch.equal(load_file(str(run / "model.safetensors"))[name], final[name]) for name in final)

    killed_before_the_final_save()  # checkpoint-4 complete now, at --max_steps
    again = train.main(common + ["--resume_from_checkpoint", "True"])
    assert again["global_step"] == 4, "no fifth step"
    assert all(torch.equal(load_file(str(run / "model.safetensors"))[name], final[name]) for name in final)


def test_a_continued_run_cut_off_in_its_final_save_leaves_no_results_of_the_earlier_model(multi30k_dir, tmp_path,
                                                                                          monkeypatch):
    import pytest

    from hf_srcfeat.commands import train
    from hf_srcfeat.trainer import SrcFeatSeq2SeqTrainer

    from .test_training import TINY

    run = tmp_path / "run"
    common = TINY + ["--output_dir", str(run), "--do_train", "--max_train_samples", "64",
                     "--per_device_train_batch_size", "8", "--save_strategy", "steps", "--save_steps", "2",
                     "--data_dir", str(multi30k_dir)]
    train.main(common + ["--max_steps", "2", "--do_predict", "--predict_with_generate", "--max_predict_samples", "4",
                         "--generation_max_length", "8"])
    assert (run / "test_predictions.txt").exists()

    checkpoint_save = SrcFeatSeq2SeqTrainer.save_model

    def cut_off(self, output_dir=None, _internal_call=False):
        if not _internal_call:  # the final save, not a checkpoint's
            raise KeyboardInterrupt
        return checkpoint_save(self, output_dir, _internal_call=_internal_call)

    monkeypatch.setattr(SrcFeatSeq2SeqTrainer, "save_model", cut_off)
    with pytest.raises(KeyboardInterrupt):
        train.main(common + ["--max_steps", "4", "--resume_from_checkpoint", "True"])
    results = json.loads((run / "results.json").read_text())
    assert results["global_step"] == 4 and results["earlier_results"][0]["global_step"] == 2
    assert not (run / "test_predictions.txt").exists(), "the step-2 model's translations"
