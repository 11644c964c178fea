"""The profiling tools read what the GPU machine writes: tools/ncu_source_summary.py and
tools/ncu_source_stalls.py on an excerpt of Nsight Compute's source page, and tools/kernel_trace.py
on a replay's CUPTI records and its graph's longest path (tests/data/profiles, real outputs of
2026-12-07). Standard library only.

    python3 tests/tools/test_profile_tools.py
"""

import io
import lzma
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "profiles")
sys.path.insert(0, ROOT)

from tools import kernel_trace, ncu_source_summary  # noqa: E402


def run_tool(script, *args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "tools", script), *args], capture_output=True,
                          text=True, check=False)


class NcuSourceSummary(unittest.TestCase):
    def setUp(self):
        with open(os.path.join(DATA, "source-page-excerpt.csv"), newline="") as f:
            self.tables = ncu_source_summary.read_tables(f)

    def test_finds_each_launch_past_the_noise_before_it(self):
        self.assertEqual([len(rows) for _, rows in self.tables], [34, 22])

    def test_names_each_launch_by_its_kernel(self):
        names = []
        with open(os.path.join(DATA, "source-page-excerpt.csv"), newline="") as f:
            ncu_source_summary.read_tables(f, names)
        self.assertEqual(len(names), 2)
        self.assertIn("SplitBf16GroupedTmaSlicesKernel<(int)1, (int)64", names[0])
        self.assertIn("DenseSplitSlicesKernel<(int)8, (int)8", names[1])

    def test_ranks_instructions_by_stall_samples(self):
        out = io.StringIO()
        header, rows = self.tables[0]
        ncu_source_summary.summarize(header, rows, 2, out)
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[0], "== 34 instructions, 1712 stall samples (Warp Stall Sampling (All Samples))")
        # The wait on the TMA barrier's phase: the loop branch after SYNCS.PHASECHK.
        self.assertEqual(lines[1].split(), ["16.9%", "0x7efb4e80d4d0", "@P0", "BRA", "0x7efb4e80d5a0"])
        self.assertEqual(lines[2].split(), ["16.1%", "0x7efb4e80e930", "@P0", "BRA", "0x7efb4e80ea00"])
        self.assertTrue(lines[3].startswith("  by opcode: BRA 37.9%, UCGABAR_WAIT 19.3%, F2FP 12.4%"), lines[3])

    def test_names_each_instructions_largest_stall_reasons(self):
        out = io.StringIO()
        header, rows = self.tables[0]
        ncu_source_summary.summarize(header, rows, 2, out, reasons=3)
        lines = out.getvalue().splitlines()
        self.assertTrue(lines[1].endswith("BRA 0x7efb4e80d5a0  [long_sb=290]"), lines[1])
        self.assertTrue(lines[2].endswith("[long_sb=272 not_selected=2 dispatch=1]"), lines[2])

    def test_stalls_tool_reads_each_launch_of_the_source_page(self):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as raw:
            raw.write("ID,Kernel Name\n,\n")  # a raw page without launches
        try:
            done = run_tool("ncu_source_stalls.py", raw.name, os.path.join(DATA, "source-page-excerpt.csv"), "1")
        finally:
            os.unlink(raw.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.count("== "), 2)
        self.assertIn("18.6%  0x7efb4f071600  UCGABAR_WAIT  [barrier=11]", done.stdout)

    def test_command_line(self):
        done = run_tool("ncu_source_summary.py", os.path.join(DATA, "source-page-excerpt.csv"), "--top", "1")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.count("== "), 2)
        self.assertEqual(done.stdout.count("DenseSplitSlicesKernel"), 1)
        self.assertIn("18.6%  0x7efb4f071600  UCGABAR_WAIT", done.stdout)

    def test_reads_the_xz_compressed_csv_gpu_profile_brings_back(self):
        with open(os.path.join(DATA, "source-page-excerpt.csv"), "rb") as f:
            raw = f.read()
        with tempfile.NamedTemporaryFile(suffix=".csv.xz", delete=False) as f:
            f.write(lzma.compress(raw))
        try:
            packed = run_tool("ncu_source_summary.py", f.name, "--top", "1")
        finally:
            os.unlink(f.name)
        plain = run_tool("ncu_source_summary.py", os.path.join(DATA, "source-page-excerpt.csv"), "--top", "1")
        self.assertEqual(packed.returncode, 0, packed.stderr)
        self.assertEqual(packed.stdout, plain.stdout)

    def test_a_file_without_a_source_page_is_refused(self):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write('"ID","Kernel Name","Metric Name","Metric Value"\n"0","Foo","Duration","12"\n')
        try:
            done = run_tool("ncu_source_summary.py", f.name)
        finally:
            os.unlink(f.name)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("no table with a source column and a stall-sampling column", done.stderr)


class KernelTrace(unittest.TestCase):
    def test_the_path_covers_the_replay(self):
        done = run_tool("kernel_trace.py", os.path.join(DATA, "trace-b1-replay2.txt"),
                        os.path.join(DATA, "graph-b1.txt"), "--top", "3")
        self.assertEqual(done.returncode, 0, done.stderr)
        out = done.stdout
        self.assertIn("replay 2 graph_ms 1.2055: 187 kernels, 1 copies or memsets", out)
        self.assertIn("the path: 106 kernels, 1183.9 us of the replay's 1183.9", out)
        # The head's product is the path's largest function, then the routed experts.
        by_function = out.split("by function")[1].splitlines()[1:3]
        self.assertEqual(by_function[0].split()[:3], ["1", "346.7", "346.73"])
        self.assertIn("GroupedBf16WsKernel<3, true, false, false, true, 8>", by_function[0])
        self.assertIn("ExpertsFp4RegistersKernel<8, 3, true, true>", by_function[1])

    def test_short_names(self):
        self.assertEqual(kernel_trace.short_name(
            "void deepinfer::cuda::(anonymous namespace)::HcMixKernel<1, false, false, 4>(float const*, long)"),
            "HcMixKernel<1, false, false, 4>")
        self.assertEqual(kernel_trace.short_name("deepinfer::cuda::(anonymous namespace)::CopyRowsKernel(float const*)"),
                         "CopyRowsKernel")


if __name__ == "__main__":
    unittest.main()
