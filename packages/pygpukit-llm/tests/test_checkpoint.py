"""SafeTensors reading and config.json: against files written here byte by
byte (the format is an 8-byte header length, a JSON header, the data)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_llm import Checkpoint, ConfigError, ModelConfig, SafetensorsError, SafeTensorsFile, estimate
from pygpukit_llm.safetensors import DTYPES

CODES = {v: k for k, v in DTYPES.items()}


def write(path, tensors: dict[str, np.ndarray], metadata=None, pad_header=0) -> None:
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": CODES[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata is not None:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode() + b" " * pad_header
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_every_dtype_round_trips_zero_copy(tmp_path, rng):
    tensors = {
        f"t.{code}": rng.standard_normal((3, 5)).astype(dt) if dt.kind == "f" or dt.kind == "V" else rng.integers(0, 2, (3, 5)).astype(dt)
        for code, dt in DTYPES.items()
    }
    tensors["empty"] = np.zeros((0, 4), np.float32)
    write(tmp_path / "model.safetensors", tensors, metadata={"format": "pt"})
    f = SafeTensorsFile(tmp_path / "model.safetensors")
    assert f.metadata == {"format": "pt"} and len(f) == len(tensors)
    for name, want in tensors.items():
        got = f.numpy(name)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        if got.size:
            assert not got.flags.writeable  # read-only views of the mapped file
    info = f.info("t.BF16")
    assert info.dtype == np.dtype(gp.bfloat16) and info.nbytes == 30


def test_to_device_converts_on_the_device(tmp_path, rng):
    w = rng.standard_normal((16, 8)).astype(gp.bfloat16)
    write(tmp_path / "model.safetensors", {"w": w})
    ck = Checkpoint(tmp_path)
    a = ck.to_device("w")
    assert a.dtype == np.dtype(gp.bfloat16)
    np.testing.assert_array_equal(a.to_numpy().view(np.uint16), w.view(np.uint16))
    f32 = ck.to_device("w", gp.float32)
    np.testing.assert_array_equal(f32.to_numpy(), w.astype(np.float32))


def test_sharded_index(tmp_path, rng):
    a, b = rng.standard_normal(4).astype(np.float32), rng.standard_normal(6).astype(np.float16)
    write(tmp_path / "model-00001-of-00002.safetensors", {"a": a})
    write(tmp_path / "model-00002-of-00002.safetensors", {"b": b})
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    ck = Checkpoint(tmp_path)
    assert sorted(ck.keys()) == ["a", "b"] and len(ck.files) == 2
    np.testing.assert_array_equal(ck.numpy("b"), b)
    assert ck.nbytes() == a.nbytes + b.nbytes
    with pytest.raises(SafetensorsError, match="no tensor 'c'"):
        ck.numpy("c")
    index["weight_map"]["c"] = "model-00003-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SafetensorsError, match="missing"):
        Checkpoint(tmp_path)
    index["weight_map"]["c"] = "model-00001-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SafetensorsError, match="shards do not hold"):
        Checkpoint(tmp_path)


@pytest.mark.parametrize(
    "corrupt, match",
    [
        (lambda raw: raw[:5], "too short"),
        (lambda raw: raw[:-3], "truncated"),
        (lambda raw: struct.pack("<Q", 1 << 40) + raw[8:], "header length"),
        (lambda raw: raw[:8] + b"}" + raw[9:], "not valid JSON"),
    ],
    ids=["tiny", "truncated-data", "huge-header", "bad-json"],
)
def test_corrupt_files_are_rejected_with_the_reason(tmp_path, rng, corrupt, match):
    p = tmp_path / "m.safetensors"
    write(p, {"x": rng.standard_normal(8).astype(np.float32)})
    p.write_bytes(corrupt(p.read_bytes()))
    with pytest.raises(SafetensorsError, match=match):
        SafeTensorsFile(p)


def test_bad_headers(tmp_path):
    def header(h) -> SafeTensorsFile:
        raw = json.dumps(h).encode()
        p = tmp_path / "h.safetensors"
        p.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(64))
        return SafeTensorsFile(p)

    with pytest.raises(SafetensorsError, match="dtype 'F4'"):
        header({"x": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})
    with pytest.raises(SafetensorsError, match="8 bytes for shape"):
        header({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})
    with pytest.raises(SafetensorsError, match="overlap"):
        header({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})
    with pytest.raises(SafetensorsError, match="non-negative ints"):
        header({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})
    with pytest.raises(SafetensorsError, match="strings to strings"):
        header({"__metadata__": {"a": 1}})
    with pytest.raises(SafetensorsError, match="neither"):
        Checkpoint(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SafetensorsError, match=r"no model\.safetensors"):
        Checkpoint(empty)


LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
    "max_position_embeddings": 256,
}


def test_config_normalizes_both_naming_schemes():
    c = ModelConfig.from_dict(LLAMA)
    assert (c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.tie_word_embeddings) == (2, 8, 2, 8, False)
    g = ModelConfig.from_dict({"model_type": "gpt2", "n_embd": 48, "n_layer": 3, "n_head": 4, "vocab_size": 50, "n_positions": 128})
    assert (g.hidden_size, g.num_layers, g.num_kv_heads, g.intermediate_size, g.max_position_embeddings, g.tie_word_embeddings) == (
        48,
        3,
        4,
        192,
        128,
        True,
    )
    m = ModelConfig.from_dict({**LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 64})
    assert (m.num_experts, m.num_experts_per_tok, m.sliding_window) == (8, 2, 64)
    with pytest.raises(ConfigError, match=r"not supported; supported model types: gpt2, llama"):
        ModelConfig.from_dict({**LLAMA, "model_type": "bert", "architectures": ["BertModel"]})
    with pytest.raises(ConfigError, match="missing vocab_size"):
        ModelConfig.from_dict({k: v for k, v in LLAMA.items() if k != "vocab_size"})
    with pytest.raises(ConfigError, match="multiple of num_key_value_heads"):
        ModelConfig.from_dict({**LLAMA, "num_key_value_heads": 3})


def test_parameter_count_matches_a_hand_count():
    c = ModelConfig.from_dict(LLAMA)
    # per layer: q 64x64, k and v 64x16 each, o 64x64, gate/up/down 3 x 64x128, two norms of 64
    per_layer = 64 * 64 * 2 + 2 * 64 * 16 + 3 * 64 * 128 + 2 * 64
    assert c.parameter_count() == 2 * per_layer + 2 * 100 * 64 + 64


def test_estimate_from_headers_or_config(tmp_path, rng):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    e = estimate(tmp_path, "bfloat16", max_seq_len=128, batch=2)
    c = ModelConfig.from_dict(LLAMA)
    assert e.weights_bytes == c.parameter_count() * 2  # no checkpoint yet: from the config
    assert e.kv_cache_bytes == 2 * 2 * 2 * 128 * 2 * 8 * 2
    assert e.total_bytes == e.weights_bytes + e.kv_cache_bytes + e.workspace_bytes and "KV cache" in str(e)
    write(tmp_path / "model.safetensors", {"w": rng.standard_normal((10, 10)).astype(np.float32)})
    assert estimate(tmp_path, "float16", max_seq_len=16).weights_bytes == 100 * 2  # exact, from the headers
    with pytest.raises(ConfigError, match="longer than the model allows"):
        estimate(tmp_path, max_seq_len=1000)
    with pytest.raises(ValueError, match="positive ints"):
        estimate(tmp_path, batch=0)
    with pytest.raises(ConfigError, match=r"config\.json is missing"):
        estimate(tmp_path / "nowhere")


def test_save_file_round_trips_and_writes_whole_files(tmp_path, rng):
    from pygpukit_llm.safetensors import save_file

    tensors = {
        "b.weight": rng.standard_normal((5, 3)).astype(gp.bfloat16),
        "a.bias": rng.standard_normal(7).astype(np.float16),
        "ids": rng.integers(-9, 9, (2, 2, 2)).astype(np.int64),
        "dev": gp.from_numpy(rng.standard_normal((4,)).astype(np.float32)),
        "empty": np.zeros((0, 3), np.float32),
    }
    path = tmp_path / "m.safetensors"
    save_file(tensors, path, {"format": "pt"})
    f = SafeTensorsFile(path)
    assert f.metadata == {"format": "pt"} and sorted(f.keys()) == sorted(tensors)
    for name, t in tensors.items():
        want = t.to_numpy() if isinstance(t, gp.GPUArray) else t
        got = f.numpy(name)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    (n,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert n % 8 == 0  # the data section starts aligned
    with pytest.raises(SafetensorsError, match="cannot hold"):
        save_file({"c": np.zeros(2, np.complex64)}, tmp_path / "bad.safetensors")
    with pytest.raises(SafetensorsError, match="names must be"):
        save_file({"__metadata__": np.zeros(2, np.float32)}, tmp_path / "bad.safetensors")
    assert not list(tmp_path.glob("bad*"))  # nothing half-written
    st = pytest.importorskip("safetensors.numpy")  # the reference reader agrees (it has no bfloat16)
    plain = {k: v for k, v in tensors.items() if isinstance(v, np.ndarray) and v.dtype != gp.bfloat16}
    save_file(plain, tmp_path / "plain.safetensors")
    for name, arr in st.load_file(str(tmp_path / "plain.safetensors")).items():
        np.testing.assert_array_equal(arr, plain[name])
