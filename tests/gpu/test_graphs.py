"""Scans captured into CUDA graphs (CuPy's and torch's) and replayed: every replay scans the
inputs of its time, with every strategy, at sizes of one section (no scratch), a single
pass of many tiles and the multi-level plans; plain calls between replays, a larger call
that replaces the stream's scratch, and two graphs replayed at once on two streams. A
primitive refuses a capture with a clear error, leaving the capture intact.
Non-commutative operators, references that fold with the operator."""
import numpy as np
import pytest

import scangen
from scangen.spec import STRATEGIES

from tests.support import operator, precompile, random_input, require_module, scan_reference

SECTION = 256
SIZES = [SECTION - 3, 40 * SECTION + 1, 3 * SECTION**2 + 7]
OP = operator("affine_then")


def affine_scan(strategy):
    return scangen.Scan(np.uint64, OP, strategy=strategy, section_size=SECTION)


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    precompile([affine_scan(strategy) for strategy in STRATEGIES])


def fresh(rng, n):
    return random_input(rng, np.uint64, "affine_then", n)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cupy_graph_replays_scan_the_inputs_of_their_time(gpu, rng, strategy):
    cp = require_module("cupy")
    scan = affine_scan(strategy)
    stream = cp.cuda.Stream(non_blocking=True)
    for n in SIZES:
        x, out = cp.asarray(fresh(rng, n)), cp.empty(n, np.uint64)
        with stream:
            scan(x, out)  # a warm-up call binds and loads outside the capture
            stream.begin_capture()
            scan(x, out)
            graph = stream.end_capture()
        for replay in range(3):
            host = fresh(rng, n)
            with stream:
                x.set(host)
                graph.launch()
            stream.synchronize()
            np.testing.assert_array_equal(out.get(), scan_reference(host, OP),
                                          err_msg=f"n={n}, replay {replay}")
            # plain calls between replays, one larger (a new scratch for the stream)
            bigger = fresh(rng, n * (replay + 2))
            with stream:
                got = scan(cp.asarray(bigger))
            stream.synchronize()  # the stream is non-blocking: get() would not wait for it
            np.testing.assert_array_equal(got.get(), scan_reference(bigger, OP))


def test_two_graphs_replayed_at_once_on_two_streams(gpu, rng):
    cp = require_module("cupy")
    scan = affine_scan("decoupled_lookback")
    n = 3 * SECTION**2 + 7
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    arrays, graphs = [], []
    for stream in streams:
        x, out = cp.empty(n, np.uint64), cp.empty(n, np.uint64)
        with stream:
            scan(x, out)
            stream.begin_capture()
            scan(x, out)
            graphs.append(stream.end_capture())
        arrays.append((x, out))
    for _ in range(3):
        hosts = [fresh(rng, n) for _ in streams]
        for (x, _), host in zip(arrays, hosts):
            x.set(host)
        cp.cuda.Device().synchronize()
        for graph, stream in zip(graphs, streams):
            graph.launch(stream=stream)
        cp.cuda.Device().synchronize()
        for (_, out), host in zip(arrays, hosts):
            np.testing.assert_array_equal(out.get(), scan_reference(host, OP))


def test_torch_graph_of_a_prepared_scan_and_a_one_shot_scan(gpu, rng):
    torch = require_module("torch")
    n = 1_000_003
    scan = scangen.Scan(np.int32, operator("last_nonzero"))
    x = torch.zeros(n, dtype=torch.int32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run = scan.prepare(x)
        run()
        summed = scangen.inclusive_scan(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):  # the stream the prepared scan launches on
        run()
        summed = scangen.inclusive_scan(x)
    for _ in range(3):
        host = random_input(rng, np.int32, "last_nonzero", n)
        x.copy_(torch.from_numpy(host))
        graph.replay()
        torch.cuda.synchronize()
        np.testing.assert_array_equal(run.out.cpu().numpy(),
                                      scan_reference(host, operator("last_nonzero")))
        np.testing.assert_array_equal(summed.cpu().numpy(),
                                      scan_reference(host, operator("add")))


def test_a_primitive_refuses_a_capture(gpu):
    cp = require_module("cupy")
    x = cp.arange(10_000, dtype=np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        scangen.histogram(x, 8, (0.0, 10_000.0))
        stream.begin_capture()
        try:
            with pytest.raises(RuntimeError, match="cannot be captured into a CUDA graph"):
                scangen.histogram(x, 8, (0.0, 10_000.0))
        finally:
            stream.end_capture()
        counts, _ = scangen.histogram(x, 8, (0.0, 10_000.0))
    stream.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(counts),
                                  np.histogram(cp.asnumpy(x), 8, (0.0, 10_000.0))[0])
