"""tracekit.capture: a real 2-rank gloo run captured, converted and linked (skipped only without torch)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tracekit.capture import capture_paths

SCRIPT = textwrap.dedent("""
    import os, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from tracekit.capture import capture

    def step(model, opt, rank):
        x = torch.randn(8, 16)
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        t = torch.ones(1000) * rank
        dist.all_reduce(t)                          # 4,000 bytes
        b = torch.zeros(256)
        dist.broadcast(b, src=0)                    # 1,024 bytes
        out = torch.zeros(2 * 64)
        dist.all_gather_into_tensor(out, torch.ones(64))  # 256 bytes per rank
        p = torch.zeros(32)
        if rank == 0:
            dist.send(p, dst=1, tag=7)              # 128 bytes
        else:
            dist.recv(p, src=0, tag=7)

    def main(rank, world, out_dir, port):
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step(model, opt, rank)                      # warm-up, not captured
        with capture(out_dir) as cap:
            step(model, opt, rank)
        assert cap.complete and cap.rank == rank
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(main, args=(2, sys.argv[1], port), nprocs=2, join=True)
""")


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    pytest.importorskip("torch", reason="capture test needs torch (pip install torch==2.13.0)")
    d = tmp_path_factory.mktemp("capture")
    script = d / "run.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(script), str(d / "out")], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d / "out"


def test_files_named_by_rank_and_no_temporaries(captured):
    for r in (0, 1):
        et, kineto = capture_paths(captured, r)
        assert et.stat().st_size > 0 and kineto.stat().st_size > 0
    assert sorted(p.name for p in captured.iterdir()) == [
        "et_rank0.json",
        "et_rank1.json",
        "kineto_rank0.json",
        "kineto_rank1.json",
    ]


def test_kineto_only_conversion_of_capture(captured):
    from tracekit.converters.pytorch.kineto_convert import convert_kineto
    from tracekit.model import CollectiveType, NodeType
    from tracekit.checks.validate import validate_traceset

    ts = convert_kineto([capture_paths(captured, r)[1] for r in (0, 1)])
    assert ts.ranks == (0, 1)
    assert validate_traceset(ts).ok
    for rank, trace in ts.items():
        comms = [n for n in trace.nodes if n.is_comm]
        colls = {(n.comm_type, n.comm_bytes) for n in comms if n.type == NodeType.COMM_COLL_NODE}
        assert {
            (CollectiveType.ALL_REDUCE, 4000),
            (CollectiveType.BROADCAST, 1024),
            (CollectiveType.ALL_GATHER, 256),
        } <= colls
        (p2p,) = [n for n in comms if n.type != NodeType.COMM_COLL_NODE]
        assert p2p.type == (NodeType.COMM_SEND_NODE if rank == 0 else NodeType.COMM_RECV_NODE)
        assert (p2p.comm_src, p2p.comm_dst, p2p.comm_tag, p2p.comm_bytes) == (0, 1, 7, 128)


def test_capture_links_by_record_function_id(captured):
    from tracekit.converters.pytorch.et_reader import read_et
    from tracekit.converters.pytorch.kineto_reader import read_kineto
    from tracekit.converters.pytorch.linker import link

    for r in (0, 1):
        et_path, kineto_path = capture_paths(captured, r)
        report = link(read_et(et_path), read_kineto(kineto_path)).report
        assert report.method == "rf_id"
        assert report.host_rate >= 0.99, report.summary()


def test_failed_block_leaves_no_files(tmp_path):
    pytest.importorskip("torch")
    from tracekit.capture import capture

    with pytest.raises(RuntimeError, match="boom"):
        with capture(tmp_path, rank=5):
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
