"""training/graph.py with a mode that has a rule (registry.Mode.rule), the lab's Co-teaching and Co-teaching+: a new key,
and so a new recorded step, exactly where the step reads a new host number (R(t), Co-teaching+'s rules), and the
compiled (CPU) and captured (CUDA) step equal to the eager one across them."""
import pytest
import torch
from test_cuda_config import has_cpp_compiler
from test_graph import CUDA, N, gaps, run_pair, train_steps

import mutual
from mutual import Clock, Method
from training import graph


def coteach(num_gradual, mode="coteach"):
    return Method(mode=mode, lc="ce", eta=None, b=None,
                  comparators=mutual.Comparators(forget_rate=0.4, num_gradual=num_gradual))


@pytest.mark.skipif(not has_cpp_compiler(), reason="torch.compile on CPU needs a C++ compiler")
def test_the_compiled_step_equals_the_eager_step_across_a_new_rule(monkeypatch):
    """20 steps over two epochs: the lr falls tenfold after the first, and Co-teaching's R(t) falls from 1 to 0.6, a
    new key and a new compiled graph (aot_eager: the same graphs, no generated code, to keep the test short); no other
    step compiles anew, and every step's sums and the final weights equal the eager step's."""
    monkeypatch.setitem(graph.COMPILE, "cpu", dict(backend="aot_eager"))
    torch._dynamo.reset()
    method = coteach(1)
    eager, eager_params, _, _ = train_steps("off", method)
    compiled, compiled_params, keys, graphs = train_steps("compile", method)
    assert graphs[0] > 0
    new_key = [k not in keys[:i] for i, k in enumerate(keys)]
    assert sum(new_key) == 2 and [b > a for a, b in zip(graphs[1:], graphs[2:])] == new_key[2:], graphs
    assert graphs[-1] <= graphs[1] * sum(new_key), graphs
    torch.testing.assert_close(compiled, eager, rtol=0, atol=1e-5)
    for a, b in zip(compiled_params, eager_params):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_a_new_key_exactly_where_the_rule_gives_a_new_host_number():
    x = [torch.zeros(N, 3, 4, 4)]
    clocks = [Clock(15, 0, 400, 20, 0), Clock(15, 399, 400, 20, 0)]
    plain = coteach(10)  # R(t) moves for 10 epochs, then stays
    assert [len({graph.key(plain, Clock(e, i, 400, 20, 0), x) for i in (0, 399)}) for e in (0, 15)] == [1, 1]
    assert graph.key(plain, Clock(0, 0, 400, 20, 0), x) != graph.key(plain, Clock(1, 0, 400, 20, 0), x)
    assert graph.key(plain, Clock(10, 0, 400, 20, 0), x) == graph.key(plain, Clock(15, 0, 400, 20, 0), x)
    plus = coteach(10, "coteach+")  # its step rule flips at (epoch + 1) i = 5000
    assert graph.key(plus, clocks[0], x) != graph.key(plus, clocks[1], x)


CASES = {"coteach": ["--mode", "coteach", "--num-gradual", "2"],  # R(t) changes every epoch: a new key
         "coteach+": ["--mode", "coteach+", "--num-gradual", "2", "--coteach-plus-init", "1"]}


@pytest.mark.cuda
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_captured_step_equals_the_eager_step_on_cuda(tmp_path, monkeypatch, case):
    eager, captured = run_pair(tmp_path, monkeypatch, CUDA + CASES[case] + ["--amp", "off"], ["off", "capture"])
    gap = gaps(eager, captured, "ab")
    assert gap["loss"] <= 1e-4 and gap["acc"] <= 100 / 500 + 1e-9, gap  # one test sample of 500
