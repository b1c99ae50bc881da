"""CUDA graphs: capture, replay with updated inputs, the private pool, the rules.
The same tests run on the CPU backend's recording twin."""

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import random_array


def test_replay_recomputes_from_updated_inputs(rng):
    x_host = random_array(rng, (1000,), np.float32)
    x = gp.from_numpy(x_host)
    w = gp.from_numpy(random_array(rng, (1000,), np.float32))
    with gp.graph() as g:
        y = gp.exp(x / 8) * w + 1  # temporaries and y come from the graph's pool
        s = gp.sum(y)
        z = gp.softmax(y.reshape(10, 100), axis=-1)
    assert g.num_nodes >= 4
    for _ in range(3):
        new = random_array(rng, (1000,), np.float32)
        x[...] = new
        g.replay()
        want = np.exp(new.astype(np.float64) / 8) * w.to_numpy() + 1
        np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s.item(), want.sum(), rtol=1e-5)
        e = np.exp(want.reshape(10, 100) - want.reshape(10, 100).max(-1, keepdims=True))
        np.testing.assert_allclose(z.to_numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_host_values_copied_during_capture_are_the_graphs_constants(rng):
    """Arrays made from host data inside the block (where's scalars become 0-d
    arrays, an explicit from_numpy) keep their capture-time values on every
    replay, after the NumPy temporaries they came from are gone and their
    memory reused (a copy captured from pageable memory would read it again)."""
    x = gp.from_numpy(random_array(rng, (300,), np.float32))
    offsets = np.linspace(-1, 1, 300).astype(np.float32)
    with gp.graph() as g:
        y = gp.where(x > 0, x, -1.5) + gp.where(gp.isfinite(x), 0.25, 7.0)
        z = x * gp.from_numpy(offsets * 3)
    del offsets
    for _ in range(3):
        junk = [np.full(n, 123.0 + n, np.float32) for n in range(1, 400)]  # reuses the freed host memory
        new = random_array(rng, (300,), np.float32)
        x[...] = new
        g.replay()
        np.testing.assert_allclose(y.to_numpy(), np.where(new > 0, new, -1.5) + 0.25, rtol=1e-6)
        np.testing.assert_allclose(z.to_numpy(), new * (np.linspace(-1, 1, 300).astype(np.float32) * 3), rtol=1e-6)
        del junk


def test_capture_does_not_run_until_replayed_on_gpu():
    if gp.backend() != "cuda":
        pytest.skip("the CPU twin runs the ops once while recording them")
    x = gp.ones((256,))
    with gp.graph() as g:
        x += 1  # in place: recorded, not run
    assert x.to_numpy()[0] == 1.0
    g.replay()
    g.replay()
    assert x.to_numpy()[0] == 3.0


def test_in_place_chain_and_streams():
    acc = gp.zeros((64,), gp.float32)
    one = gp.ones((64,), gp.float32)
    with gp.graph() as g:
        for _ in range(10):
            gp.add(acc, one, out=acc)
    start = acc.to_numpy()[0]  # 0 on the GPU, 10 on the CPU twin (ran once while recording)
    s = gp.Stream()
    g.replay(stream=s)
    with s:
        g.replay()
    s.synchronize()
    assert acc.to_numpy()[0] == start + 20


@pytest.mark.parametrize(
    "body",
    [lambda x: x.to_numpy(), lambda x: x.sum().item(), lambda x: bool(x[0] > 0), lambda x: repr(x), lambda x: gp.synchronize()],
    ids=["to_numpy", "item", "bool", "repr", "synchronize"],
)
def test_host_synchronization_inside_capture_is_an_error(body):
    x = gp.ones((8,))
    with pytest.raises(gp.GraphCaptureError, match="not allowed while a graph is being captured"):
        with gp.graph():
            y = x * 2
            body(y)
    # the capture was abandoned cleanly: ops and syncs work again
    np.testing.assert_array_equal((x * 3).to_numpy(), np.full(8, 3.0))
    gp.synchronize()


def test_graph_misuse():
    g = gp.graph()
    with pytest.raises(gp.GraphCaptureError, match="has finished"):
        g.replay()
    with pytest.raises(gp.GraphCaptureError, match="not been captured"):
        _ = g.num_nodes
    x = gp.ones((4,))
    with g:
        x * 2
        with pytest.raises(gp.GraphCaptureError, match="nested"):
            with gp.graph():
                pass
    with pytest.raises(gp.GraphCaptureError, match="already been captured"):
        with g:
            pass
    assert "nodes" in repr(g)


def test_error_inside_capture_propagates_and_restores():
    x = gp.ones((4,))
    with pytest.raises(ValueError, match="broadcast"):
        with gp.graph():
            x + gp.ones((5,))
    assert not gp.graphs.capturing()
    np.testing.assert_array_equal((x + 1).to_numpy(), np.full(4, 2.0))


def test_private_pool_memory_is_not_shared_after_capture(rng):
    x = gp.from_numpy(random_array(rng, (4096,), np.float32))
    with gp.graph() as g:
        tmp = x * 2
        y = tmp + 1
        del tmp  # freed inside the capture: stays with the graph's pool
    others = [gp.full((4096,), 7.0) for _ in range(4)]  # main-pool allocations made after capture
    g.replay()
    for o in others:
        np.testing.assert_array_equal(o.to_numpy(), np.full(4096, 7.0, np.float32))
    np.testing.assert_allclose(y.to_numpy(), x.to_numpy() * 2 + 1)


def test_graph_dropped_during_a_capture_waits_for_its_end(rng):
    """`with gp.graph() as g:` in a loop drops the previous graph as the next
    capture begins: destroying it (and freeing its pool) then would invalidate
    that capture, so it waits until the capture ends; both graphs' results stay right."""
    x = gp.from_numpy(random_array(rng, (512,), np.float32))
    for i in range(3):
        with gp.graph() as g:  # rebinding g drops the previous graph here, mid-capture
            y = x * (i + 2) + 1
            assert len(gp.graphs._deferred) == (1 if i else 0)
        assert not gp.graphs._deferred  # destroyed once the capture ended
        g.replay()
        np.testing.assert_allclose(y.to_numpy(), x.to_numpy() * (i + 2) + 1, rtol=1e-6)
    with gp.graph() as last:
        del g  # an explicit drop mid-capture, too
        z = x + 5
    assert not gp.graphs._deferred
    last.replay()
    np.testing.assert_allclose(z.to_numpy(), x.to_numpy() + 5)


def test_captures_from_two_threads(rng):
    """On the GPU two threads capture at once, each graph with its own private
    pool, and the main pool serves alone again afterwards; the CPU backend's
    captures run one at a time and say so."""
    import threading

    from pygpukit import _runtime

    main_pool = _runtime.get().pool
    xs = [gp.from_numpy(random_array(rng, (64,), np.float32)) for _ in range(2)]
    inside, release = threading.Barrier(2), threading.Event()
    results: dict[int, object] = {}

    def capture(i):
        try:
            with gp.graph() as g:
                y = gp.exp(xs[i]) * (i + 2)
                if gp.backend() == "cuda":
                    inside.wait(timeout=10)  # both captures are open here
                else:
                    release.wait(timeout=10)
            results[i] = (g, y)
        except gp.GraphCaptureError as e:
            results[i] = e
            release.set()

    threads = [threading.Thread(target=capture, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert _runtime.get().pool is main_pool
    if gp.backend() != "cuda":
        errors = [r for r in results.values() if isinstance(r, gp.GraphCaptureError)]
        assert len(errors) == 1 and "one at a time" in str(errors[0])
        return
    for i, (g, y) in results.items():
        xs[i][...] = gp.from_numpy(np.full(64, 0.5, np.float32))
        g.replay()
        np.testing.assert_allclose(y.to_numpy(), np.exp(0.5) * (i + 2), rtol=1e-6)
