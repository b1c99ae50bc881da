"""pygpukit generate / chat on a tiny model directory, and the one-line errors
(exit status 2) for what a user can get wrong; the commands come from the llm
plugin's ``pygpukit_register_commands`` (their modules imported when they run)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from llm_testing import write_tiny_model
from tokenizer_testing import CHATML, byte_level_json, model_dir

import pygpukit as gp
import pygpukit_llm
from pygpukit_llm.cli import chat_main, generate_main

COMMANDS = ("chat", "generate", "bench-llm")


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen")
    write_tiny_model(path, "qwen2", seed=5, hidden=128, heads=2, kv_heads=1, intermediate=192, vocab=512, layers=2, max_positions=128)
    model_dir(path, byte_level_json(), tokenizer_config={"chat_template": CHATML, "eos_token": "<|im_end|>"})
    return path


def test_generate_prints_the_completion(directory, capsys):
    args = ["--model", str(directory), "--dtype", "float32", "--temperature", "0", "--max-new-tokens", "12"]
    assert generate_main([*args, "--prompt", "lorem ipsum"]) == 0
    want = pygpukit_llm.load(directory, "float32").generate("lorem ipsum", max_new_tokens=12, temperature=0).text
    assert capsys.readouterr().out == want + "\n"


def test_generate_with_quantized_weights(directory, capsys):
    pytest.importorskip("pygpukit_gemm")
    args = [
        "--model",
        str(directory),
        "--dtype",
        "float32",
        "--temperature",
        "0",
        "--max-new-tokens",
        "8",
        "--quantize",
        "int8",
        "--group-size",
        "64",
    ]
    assert generate_main([*args, "--prompt", "lorem ipsum"]) == 0
    model = pygpukit_llm.load(directory, "float32", quantize="int8", group_size=64)
    assert capsys.readouterr().out == model.generate("lorem ipsum", max_new_tokens=8, temperature=0).text + "\n"


def test_chat_keeps_a_conversation(directory, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("hello there\n/reset\n\nsecond try\n/exit\n"))
    args = ["--model", str(directory), "--dtype", "float32", "--temperature", "0", "--max-new-tokens", "6", "--system", "be brief"]
    assert chat_main(args) == 0
    model = pygpukit_llm.load(directory, "float32")
    system = {"role": "system", "content": "be brief"}
    first = model.chat([system, {"role": "user", "content": "hello there"}], max_new_tokens=6, temperature=0).text
    second = model.chat([system, {"role": "user", "content": "second try"}], max_new_tokens=6, temperature=0).text
    assert capsys.readouterr().out == f"> {first}\n> > > {second}\n> "  # input()'s prompts, then each reply


def test_user_errors_are_one_line(directory, tmp_path, capsys):
    def error(argv):
        assert generate_main([*argv, "--prompt", "x"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("pygpukit: error: ") and err.count("\n") == 1
        return err

    assert "not a model directory" in error(["--model", str(tmp_path / "none")])
    assert "longer than the model allows" in error(["--model", str(directory), "--max-new-tokens", "1000"])
    bad = tmp_path / "mamba"
    write_tiny_model(bad, "llama", hidden=128, heads=2, kv_heads=1)
    (bad / "config.json").write_text(json.dumps(dict(json.loads((bad / "config.json").read_text()), model_type="mamba")))
    assert "supported model types: gpt2" in error(["--model", str(bad)])
    broken = tmp_path / "broken"
    write_tiny_model(broken, "llama", hidden=128, heads=2, kv_heads=1)
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert "model.safetensors" in error(["--model", str(broken)])
    plain = tmp_path / "plain"
    write_tiny_model(plain, "llama", hidden=128, heads=2, kv_heads=1)
    assert "has no tokenizer.json" in error(["--model", str(plain)])


@pytest.fixture
def llm_plugin():
    """The llm plugin active (registered explicitly when the package is on the path but not installed)."""
    if "llm" not in {p.name for p in gp.plugins.plugins() if p.status == "active"}:
        from pygpukit_llm import plugin

        gp.plugins.register(plugin, name="llm")


def test_commands_run_through_pygpukit(directory, capsys, llm_plugin):
    import pygpukit.cli as cli

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help lines
    for name in COMMANDS:
        assert f"(from plugin llm; pygpukit {name} --help)" in out, out
    args = ["--model", str(directory), "--dtype", "float32", "--temperature", "0", "--max-new-tokens", "12", "--prompt", "lorem ipsum"]
    assert cli.main(["generate", *args]) == 0
    via_pygpukit = capsys.readouterr().out
    assert generate_main(args) == 0
    assert via_pygpukit == capsys.readouterr().out
    assert cli.main(["generate", "--model", str(directory / "none"), "--prompt", "x"]) == 2  # the exit status comes through


def test_loading_the_plugin_does_not_import_the_commands():
    code = (
        "import sys, pygpukit as gp\n"
        "if 'llm' not in {p.name for p in gp.plugins.plugins() if p.status == 'active'}:\n"
        "    from pygpukit_llm import plugin\n"
        "    gp.plugins.register(plugin, name='llm')\n"
        "gp.plugins.plugins()\n"
        "loaded = [m for m in ('pygpukit_llm.cli', 'pygpukit_llm.bench') if m in sys.modules]\n"
        "assert 'pygpukit_llm.plugin' in sys.modules and not loaded, loaded\n"
        "print('OK')"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "OK" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
