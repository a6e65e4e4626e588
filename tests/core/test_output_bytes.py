"""The bytes the CLI writes are those it wrote before issue 31 (the core split into wire/, model/, sets/, checks/,
costs/, interop/): sha256 of every file, pinned from main at cb7b922 (the commit before the restructure).

The digests are the "before" column of the issue's full list (34 commands, 259 files: ``restruct_sha256.tsv`` of the
issue-31 note, made by ``hashes.sh``): here the cheap part of it, run in-process. Re-run at cb7b922 for this test (a
``git archive`` of it on ``PYTHONPATH``): the 47 files of every case but ``gen-llm`` and the three text workloads
have the same digests. Bundled samples and small generated sets always; real captures of ``../shared/real`` (marked
``realdata``) when present. The bundled PyTorch samples are the real torch-cpu-gloo captures ``single`` and
``dist_ws2`` (same digests), so they count as real captures too. Left out: outputs naming absolute paths (``export
astra``'s ``run.sh`` and ``.tracekit-export.json``), and the large sets (``generate llm --classes`` of GPT-3 13B and
its ``expand``, hf-gpt2, the param-resnet captures: seconds to minutes each). Nothing pinned here runs a projection
or context parallelism, so issue 28's later changes (TF32 projection policy, ring CP as send/recv) do not touch
these bytes. One intended change since: ``gen-llm``'s rank files are re-pinned at the merge of h-overlapbug, where
generated collectives gained a ``stream`` per process-group kind (ProcessGroupNCCL runs each group on its own
stream); its ``comm_groups.json`` is still the pre-restructure digest.

A digest that differs means the written bytes changed: find the commit (``git bisect`` with this test) and either
fix it or, for an intended format change, re-pin the digests in the same commit and say why in its message.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli

# case -> (kind, command; {samples}, {real} and {out} filled in, one argument per space, globs expanded by the CLI,
# {file: sha256 at cb7b922})
CASES: dict[str, tuple[str, str, dict[str, str]]] = {
    "sample-text": (
        "bundled",
        "convert text {samples}/text/Resnet50_DataParallel.txt --ranks 4 -o {out}/out",
        {
            "out.0.et": "678730fe29d71d16a5903c2e00ea726fe7144935a64d58fb7273aafdc61c7d9c",
            "out.1.et": "678730fe29d71d16a5903c2e00ea726fe7144935a64d58fb7273aafdc61c7d9c",
            "out.2.et": "678730fe29d71d16a5903c2e00ea726fe7144935a64d58fb7273aafdc61c7d9c",
            "out.3.et": "678730fe29d71d16a5903c2e00ea726fe7144935a64d58fb7273aafdc61c7d9c",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "sample-single": (
        "bundled",
        "convert pytorch --et {samples}/pytorch/single/et_rank*.json --kineto {samples}/pytorch/single/kineto_rank*.json -o {out}/out",
        {
            "out.0.et": "ab7df53b247f7a5fce6c18f230e9a46a374f7298f6ba971bf2ebd02de4afa312",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "sample-dist_ws2": (
        "bundled",
        "convert pytorch --et {samples}/pytorch/dist_ws2/et_rank*.json --kineto {samples}/pytorch/dist_ws2/kineto_rank*.json -o {out}/out",
        {
            "out.0.et": "558941efdcdcb07231b724d66bd46b73962c39cf7a0d866c4c5b41e098e48a2a",
            "out.1.et": "d200ef49fc8f75fc215b5bbfd1b2b994ed545d758f69a8f611c4b052686dc4c5",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "dump-sample": (
        "bundled",
        "dump {samples}/chakra/all_reduce.0.et -o {out}/all_reduce.json",
        {
            "all_reduce.json": "180b6b0dc8ac378c6f8c8036271f41ffa06447ddd4923dff0b9e787c4c2dd2ec",
        },
    ),
    "load-sample": (
        "bundled",
        "load {samples}/chakra/small_chakra.0.json -o {out}/small",
        {
            "small": "0b1b52099710bc41bb5f446e157c6a2329658d42a477c547d25cba30b0728d2c",
        },
    ),
    "gen-micro4": (
        "generated",
        "generate micro --collective all_gather --size 1MiB --ranks 4 -o {out}/out",
        {
            "out.0.et": "a14842ce917a915dacbdee9b1806c20b31f85634d0c3763da55091ac74237c25",
            "out.1.et": "a14842ce917a915dacbdee9b1806c20b31f85634d0c3763da55091ac74237c25",
            "out.2.et": "a14842ce917a915dacbdee9b1806c20b31f85634d0c3763da55091ac74237c25",
            "out.3.et": "a14842ce917a915dacbdee9b1806c20b31f85634d0c3763da55091ac74237c25",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "gen-micro": (
        "generated",
        "generate micro --collective all_reduce --size 64MiB --ranks 8 -o {out}/out",
        {
            "out.0.et": "fae8ba67023c309b26a7c95e2b33604a3cea7056365f632d492a9a0fbac6fe84",
            "out.1.et": "fae8ba67023c309b26a7c95e2b33604a3cea7056365f632d492a9a0fbac6fe84",
            "out.2.et": "fae8ba67023c309b26a7c95e2b33604a3cea7056365f632d492a9a0fbac6fe84",
            "out.3.et": "fae8ba67023c309b26a7c95e2b33604a3cea7056365f632d492a9a0fbac6fe84",
            "out.4.et": "fae8ba67023c309b26a7c95e2b33604a3cea7056365f632d492a9a0fbac6fe84",
            "out.5.et": "fae8ba67023c309b26a7c95e2b33604a3cea7056365f632d492a9a0fbac6fe84",
            "out.6.et": "fae8ba67023c309b26a7c95e2b33604a3cea7056365f632d492a9a0fbac6fe84",
            "out.7.et": "fae8ba67023c309b26a7c95e2b33604a3cea7056365f632d492a9a0fbac6fe84",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "gen-dlrm": (
        "generated",
        "generate dlrm --model dlrm-small --ranks 4 -o {out}/out",
        {
            "out.0.et": "6a58c28959d0ccdb014bdd3024517209a8df5200f0999d0d5ad741fdb05561f5",
            "out.1.et": "55105bd3b0978adc5dae46dc10e90a17fc913c1132a555677720952ea054ec44",
            "out.2.et": "b60e1d58a9cf1d00235faa89a77d995e8f00d1b1e87b6277d6fc298b79ecb1eb",
            "out.3.et": "8f520fb2b075529aa9a759f432b80244befda87171ffde441ca4974a7710a46d",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "gen-llm": (
        "generated",
        "generate llm --model gpt3-1.3b --tp 2 --pp 2 --dp 2 --global-batch 8 -o {out}/out",
        {
            "out.0.et": "6df3faae60f5dcf84f6886e270d04b1b01a3fa26ec86cac2a237cf7a5be49bda",
            "out.1.et": "f407a1053d40ef00c4514a8d98cbc29cb7631b7eb8334eedd489bbe03e3d35b5",
            "out.2.et": "65212e4e7e92fd06aa17a4a2a24591422c45f99bb6fb0e85c325d0b747510907",
            "out.3.et": "5d45678f3578fe289d27aecab81094121ababb5f3dd54a01770f5828d9e7f284",
            "out.4.et": "436715e8e0b330f1c486a7ff0d84df807413da246dd6ab2bf0b87f8e11e02d40",
            "out.5.et": "15a33b093446618760045f0dc59e6635c26ec6c307b2d7e36f5a9c6eae03d209",
            "out.6.et": "f157b50896c15abb4fa69e51d9e8a64c8dc59648f5f600379d7f01a3dcb4820e",
            "out.7.et": "8131cd75594fb0716b09ebb7f79a228a92f4d6a5bdcaaa4517394d6cb4032a87",
            "out.comm_groups.json": "ac6c3f04cbce17eabdb95e7832542816cb45afbc23eb600d8285d428e5bac242",
        },
    ),
    "gloo-dist_ws4": (
        "real",
        "convert pytorch --et {real}/pytorch/torch-cpu-gloo/dist_ws4/et_rank*.json --kineto {real}/pytorch/torch-cpu-gloo/dist_ws4/kineto_rank*.json -o {out}/out",
        {
            "out.0.et": "582500578b8fb1e3c2b604f9b1b73e158e1b5bba0ae00a5ff488e7503e258b81",
            "out.1.et": "b1212df4edf8dfb5f14b921b53100f29d6536fefec080fa965b6e6bf98e3cd49",
            "out.2.et": "0685a20029cf89577b61ddd46f3645c7b0e2fb7de5585e6451f3581356e41628",
            "out.3.et": "f1913bb2c8e0445cc4000562e3aae82c6da31d3221cc7926575588240b921aa8",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "kineto-docs": (
        "real",
        "convert pytorch --kineto {real}/kineto/kineto-docs/after_fix_trace.json -o {out}/out",
        {
            "out.0.et": "1ddd4676f8a361a752e881352ba43e1fb87571f6f350fa665b2629ac269a9a92",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "hta-simple-add": (
        "real",
        "convert pytorch --et {real}/pytorch/hta-simple-add/benchmark_simple_add_et.json.gz --kineto {real}/pytorch/hta-simple-add/benchmark_simple_add_trace.json.gz -o {out}/out",
        {
            "out.0.et": "fca42327559194ffcdf583c27cdf504a30fde3e9faf43a9f5e36bc52ceb40bca",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "param-linear": (
        "real",
        "convert pytorch --et {real}/pytorch/param-linear/linear_et.json.gz --kineto {real}/pytorch/param-linear/linear_kineto.json.gz -o {out}/out",
        {
            "out.0.et": "0125fbef1efe73f6567d0f45081bbd203b8631d691a89f42a673cb3d51be037f",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "text-DLRM_HybridParallel": (
        "real",
        "convert text {real}/text/DLRM_HybridParallel.txt --ranks 4 -o {out}/out",
        {
            "out.0.et": "6a309c291f786a13bafdf6e717cac160f886fa3cf5c6bd194f0616e910503218",
            "out.1.et": "6a309c291f786a13bafdf6e717cac160f886fa3cf5c6bd194f0616e910503218",
            "out.2.et": "6a309c291f786a13bafdf6e717cac160f886fa3cf5c6bd194f0616e910503218",
            "out.3.et": "6a309c291f786a13bafdf6e717cac160f886fa3cf5c6bd194f0616e910503218",
            "out.comm_groups.json": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
        },
    ),
    "text-Transformer_HybridParallel": (
        "real",
        "convert text {real}/text/Transformer_HybridParallel.txt --ranks 4 -o {out}/out",
        {
            "out.0.et": "ca23fafdd8efbadc76b9bde9fff982d75d1bb035656dddec350711fe1559b61a",
            "out.1.et": "db880ef332827dc1b7a6bc21bf46b5b0b7144f77e0114add3cb6f1036007ad18",
            "out.2.et": "b803b29d7daf82caf51bfe4956cda5892ea6eeb015671e57d34f81f2cf84cac7",
            "out.3.et": "624118cb77b3f8c9725aec756fd8314539ce45a2c1729302688f5b49cb414f41",
            "out.comm_groups.json": "b74752af8b6baef4d24ee5dc825798e2f7537ee46b5db48bde24ac029526ef59",
        },
    ),
    "text-MLP_HybridParallel_Data_Model": (
        "real",
        "convert text {real}/text/MLP_HybridParallel_Data_Model.txt --ranks 4 --tp 2 -o {out}/out",
        {
            "out.0.et": "eb4018fffd5a2a4a70b25d58c5f97ad0c9da852e10561e377edb572bab92bb39",
            "out.1.et": "31cd30a53b98e83d1e3ab1014943ae0bee34018a9cb7ef51265d7ace36756f0d",
            "out.2.et": "b78bc7e736a8f40c356573f123d753325b8574cf23d34814ade64b49498839c5",
            "out.3.et": "43f3200fa68079037ef865a3378328faea798d39f209cc527fa96d175eeff869",
            "out.comm_groups.json": "03b37416128a16699a36001bf79e5e1825ea01daa516c827990e45f0067d688a",
        },
    ),
}


def _written(args: str, out: Path, samples: Path, real: Path | None) -> dict[str, str]:
    """Run one CLI command into the empty folder ``out``; sha256 of each file it wrote, by name."""
    argv = args.format(samples=samples, real=real, out=out).split(" ")
    result = CliRunner().invoke(cli, ["-q", *argv], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())}


@pytest.mark.parametrize("case", [c for c, (kind, _, _) in CASES.items() if kind != "real"])
def test_bundled_and_generated_outputs_are_the_bytes_of_before_the_restructure(case, samples_dir, tmp_path):
    _, args, pinned = CASES[case]
    assert _written(args, tmp_path, samples_dir, None) == pinned


@pytest.mark.realdata
@pytest.mark.parametrize("case", [c for c, (kind, _, _) in CASES.items() if kind == "real"])
def test_real_capture_outputs_are_the_bytes_of_before_the_restructure(case, samples_dir, real_dir, tmp_path):
    _, args, pinned = CASES[case]
    assert _written(args, tmp_path, samples_dir, real_dir) == pinned
