"""Every file the project writes goes through `hf_srcfeat.safe_writing`: a complete new file or the old one, never a
mix; a device or FIFO is written through, a symlink followed, never replaced by a regular file."""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_srcfeat.safe_writing import replaced_atomically, write_json_atomically, write_text_atomically

from .helpers import REPO


def test_a_file_is_replaced_whole_and_keeps_its_permissions(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    target.chmod(0o640)
    write_text_atomically(target, "new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.txt"]  # no temporary file left


def test_an_error_while_writing_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "results.json"
    write_json_atomically(target, {"bleu": 30.3})
    with pytest.raises(RuntimeError), replaced_atomically(target) as handle:
        handle.write('{"bleu": ')
        raise RuntimeError("the disk filled up")
    assert json.loads(target.read_text()) == {"bleu": 30.3}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["results.json"]


def test_a_file_size_limit_mid_write_keeps_the_old_file(tmp_path):
    """As `ulimit -f` (with SIGXFSZ ignored, as a shell's `ulimit` run leaves it: the write fails with EFBIG)."""
    target = tmp_path / "eval_results.json"
    write_json_atomically(target, [{"old": True}])
    script = ("import resource, signal, sys\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
              "from hf_srcfeat.safe_writing import write_json_atomically\n"
              f"write_json_atomically({str(target)!r}, [{{'row': 'x' * 100}}] * 1000)\n")
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert completed.returncode != 0 and "File too large" in completed.stderr
    assert json.loads(target.read_text()) == [{"old": True}]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["eval_results.json"]


def gzip_header_name(path: Path) -> bytes:
    """The file name a gzip file's header records (RFC 1952: after 10 bytes, NUL-ended, when FLG.FNAME is set)."""
    data = path.read_bytes()
    assert data[3] & 0x08, "the header records a name"
    return data[10:data.index(b"\0", 10)]


def test_a_gzip_file_records_its_own_name_not_the_temporary_files(tmp_path):
    write_text_atomically(tmp_path / "out.de.gz", "Ein Hund läuft.\n")
    with replaced_atomically(tmp_path / "scores.bin.gz", "wb") as handle:
        handle.write(b"\x00\x01")
    assert gzip_header_name(tmp_path / "out.de.gz") == b"out.de"  # as gzip.open("out.de.gz", "wt") writes it
    assert gzip.decompress((tmp_path / "out.de.gz").read_bytes()).decode() == "Ein Hund läuft.\n"
    assert gzip_header_name(tmp_path / "scores.bin.gz") == b"scores.bin"
    assert gzip.decompress((tmp_path / "scores.bin.gz").read_bytes()) == b"\x00\x01"


def test_a_device_is_written_through_not_replaced():
    with replaced_atomically("/dev/null") as handle:
        handle.write("discarded\n")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen([sys.executable, "-c", f"print(open({str(fifo)!r}).read(), end='')"],
                              stdout=subprocess.PIPE, text=True)
    write_text_atomically(fifo, "through the pipe\n")
    assert reader.communicate(timeout=30)[0] == "through the pipe\n"
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_process_substitution_is_written_through(tmp_path):
    script = "import sys; from hf_srcfeat.safe_writing import write_text_atomically; " \
             "write_text_atomically(sys.argv[1], 'via bash\\n')"
    command = f"{sys.executable} -c \"{script}\" >(cat > {tmp_path / 'copy.txt'}); wait"
    subprocess.run(["bash", "-c", command], check=True, cwd=REPO, timeout=60)
    for _ in range(50):  # the substituted process may finish just after bash
        if (tmp_path / "copy.txt").exists() and (tmp_path / "copy.txt").read_text():
            break
        time.sleep(0.1)
    assert (tmp_path / "copy.txt").read_text() == "via bash\n"


def test_a_symlink_is_followed_and_stays_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "translations.de"
    real.write_text("old\n")
    link = tmp_path / "latest.de"
    link.symlink_to(real)
    write_text_atomically(link, "new\n")
    assert link.is_symlink() and link.resolve() == real.resolve() and real.read_text() == "new\n"


def test_a_folder_is_refused_naming_it(tmp_path):
    with pytest.raises(IsADirectoryError, match=f"{tmp_path} is a directory"):
        write_text_atomically(tmp_path, "x")


def test_two_writers_of_one_file_never_mix_their_lines(tmp_path):
    """Each writer streams 2,000 lines of its own; the file that remains is one writer's, whole."""
    target = tmp_path / "out.txt"
    script = ("import sys, time\n"
              "from hf_srcfeat.safe_writing import replaced_atomically\n"
              "with replaced_atomically(sys.argv[1]) as handle:\n"
              "    for index in range(2000):\n"
              "        handle.write(f'{sys.argv[2]} {index}\\n')\n"
              "        if index % 200 == 0:\n"
              "            handle.flush(); time.sleep(0.01)\n")
    writers = [subprocess.Popen([sys.executable, "-c", script, str(target), name], cwd=REPO) for name in "ab"]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    lines = target.read_text().splitlines()
    assert len(lines) == 2000 and len({line.split()[0] for line in lines}) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.txt"]


def test_the_translate_command_writes_through_a_device_and_a_symlink(model_folder, test_sentences, tmp_path):
    from hf_srcfeat.commands.translate import main

    source = tmp_path / "input.en"
    source.write_text("".join(line + "\n" for line in test_sentences[:3]), encoding="utf-8")
    options = ["--model", str(model_folder), "--input", str(source), "--num_beams", "1", "--max_new_tokens", "8",
               "--quiet", "--device", "cpu"]
    assert main([*options, "--output", "/dev/null"]) == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    real = tmp_path / "real.de"
    link = tmp_path / "link.de"
    link.symlink_to(real)
    assert main([*options, "--output", str(link)]) == 0
    assert link.is_symlink() and len(real.read_text(encoding="utf-8").splitlines()) == 3
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob(".*.partial"))


def test_every_project_writer_uses_the_shared_helper():
    """No command or benchmark rewrites a file with a bare write_text of JSON or a `.partial` rename of its own."""
    offenders = []
    for path in [*(REPO / "hf_srcfeat" / "commands").glob("*.py"), REPO / "benchmarks" / "benchmark.py"]:
        text = path.read_text()
        if '+ ".partial"' in text or "write_text(json.dumps" in text:
            offenders.append(str(Path(path).relative_to(REPO)))
    assert offenders == []


# --- No writer destroys what it reads ---------------------------------------------------------------------------


@pytest.mark.parametrize(("command", "arguments", "message"), [
    ("translate", ["--input", "{src}", "--output", "{out}", "--report_json", "{src}"],
     "--report_json {src} is the input file"),
    ("translate", ["--input", "{src}", "--output", "{out}", "--report_json", "{out}"],
     "--output and --report_json are the same file"),
    ("annotate", ["--input", "{src}", "--output", "{out}", "--report_json", "{src}"],
     "--report_json {src} is the input file"),
    ("annotate", ["--input", "{src}", "--output", "{out}", "--batch_size", "0"], "--batch_size must be at least 1"),
    ("annotate", ["--input", "{src}", "--output", "{out}", "--num_proc", "0"], "--num_proc must be at least 1"),
])
def test_outputs_that_are_inputs_and_zero_sizes_are_refused_before_any_work(command, arguments, message, tmp_path,
                                                                            capsys):
    from hf_srcfeat.commands import annotate, translate

    source = tmp_path / "input.en"
    source.write_text("A dog runs.\n")
    paths = {"src": str(source), "out": str(tmp_path / "out.txt")}
    argv = [argument.format(**paths) for argument in arguments]
    main = translate.main if command == "translate" else annotate.main
    with pytest.raises(SystemExit):
        main([*(["--model", str(tmp_path / "no_model")] if command == "translate" else []), *argv])
    assert message.format(**paths) in capsys.readouterr().err
    assert source.read_text() == "A dog runs.\n" and not (tmp_path / "out.txt").exists()


def test_no_command_writes_over_its_parse_cache_or_into_its_model_folder(model_folder, tmp_path, capsys,
                                                                        monkeypatch):
    """The cache a run uses (given, or the environment's default) and the model it loads are inputs too."""
    from hf_srcfeat.commands import annotate, score, translate

    source = tmp_path / "input.en"
    source.write_text("A dog runs.\n")
    cache = tmp_path / "annotations.sqlite"
    cache.write_bytes(b"SQLite format 3\x00 a cache")
    monkeypatch.setenv("HF_SRCFEAT_ANNOTATION_CACHE", str(cache))
    weights = (model_folder / "model.safetensors").read_bytes()
    for main, arguments, message in (
            (translate.main, ["--model", str(model_folder), "--input", str(source), "--output", str(cache)],
             f"--output {cache} is the annotation cache file"),
            (translate.main, ["--model", str(model_folder), "--input", str(source), "--output",
                              str(model_folder / "model.safetensors")], "is a file of the model folder"),
            (score.main, ["--model", str(model_folder), "--source", str(source), "--target", str(source), "--output",
                          str(model_folder / "config.json")], "is a file of the model folder"),
            (annotate.main, ["--input", str(source), "--output", str(cache)],
             f"--output {cache} is the annotation cache file")):
        with pytest.raises(SystemExit):
            main(arguments)
        assert message in capsys.readouterr().err
    assert cache.read_bytes() == b"SQLite format 3\x00 a cache"
    assert (model_folder / "model.safetensors").read_bytes() == weights
    fresh = model_folder / "translations.de"  # a new file beside the model's own is no harm
    try:
        assert translate.main(["--model", str(model_folder), "--input", str(source), "--output", str(fresh),
                               "--annotation_cache", str(tmp_path / "other.sqlite"), "--quiet"]) == 0
    finally:
        fresh.unlink(missing_ok=True)


def test_the_ctranslate2_export_refuses_to_write_over_its_model_or_into_a_file(model_folder, tmp_path, capsys):
    from hf_srcfeat.commands.export_ct2 import main

    config = (model_folder / "config.json").read_text()
    with pytest.raises(SystemExit):
        main([str(model_folder), str(model_folder), "--force"])
    assert "is the model folder" in capsys.readouterr().err
    assert (model_folder / "config.json").read_text() == config
    (tmp_path / "somefile").write_text("mine\n")
    with pytest.raises(SystemExit):
        main([str(model_folder), str(tmp_path / "somefile")])
    assert "is a file; name a folder" in capsys.readouterr().err and (tmp_path / "somefile").read_text() == "mine\n"


def test_a_run_folder_or_a_cache_that_cannot_be_made_is_refused_at_start_naming_it(tmp_path, capsys):
    from hf_srcfeat.commands import annotate, train

    somefile = tmp_path / "somefile"
    somefile.write_text("mine\n")
    with pytest.raises(SystemExit, match=f"--output_dir {somefile} is a file"):
        train.main(["--output_dir", str(somefile), "--do_train", "--use_cpu"])
    with pytest.raises(SystemExit, match=f"annotation cache {somefile / 'cache.sqlite'} is under {somefile}"):
        train.main(["--output_dir", str(tmp_path / "run"), "--do_train", "--use_cpu", "--annotation_cache",
                    str(somefile / "cache.sqlite")])
    source = tmp_path / "input.en"
    source.write_text("A dog runs.\n")
    with pytest.raises(SystemExit):
        annotate.main(["--input", str(source), "--output", str(tmp_path / "out.conllu"), "--annotation_cache",
                       str(somefile / "cache.sqlite")])
    assert f"is under {somefile}, which is a file" in capsys.readouterr().err
    assert somefile.read_text() == "mine\n" and not (tmp_path / "run").exists()
