# SPDX-License-Identifier: MIT
"""The benchmark scripts' own logic: bench/summarize.py (what BENCHMARKS.md's
"median (min–max)" figures come from), and bench/plot.sh where gnuplot is
installed. No benchmark runs here."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SUMMARIZE = os.path.join(ROOT, "bench", "summarize.py")


def summarize(*runs, tsv=False):
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, text in enumerate(runs):
            paths.append(os.path.join(d, f"run{i}.{'tsv' if tsv else 'md'}"))
            with open(paths[-1], "w", encoding="utf-8") as f:
                f.write(text)
        args = [sys.executable, SUMMARIZE] + (["--tsv"] if tsv else []) + paths
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def table(heading, rows, header="| path | value | verdict |"):
    return f"{heading}\n\n{header}\n|---|---|---|\n" + "".join(f"| {' | '.join(r)} |\n" for r in rows) + "\n"


def row_of(text, name, nth=0):
    rows = [line for line in text.splitlines() if line.startswith(f"| {name} |")]
    return [c.strip() for c in rows[nth].strip("|").split("|")]


class SummarizeTest(unittest.TestCase):
    def test_medians_and_ranges_keep_units_bold_and_drop_a_runs_own_range(self):
        out = summarize(table("## A", [["**ferry**", "0.74 µs (0.60–0.90)", "met"]]),
                        table("## A", [["**ferry**", "0.90 µs (0.70–1.10)", "met"]]),
                        table("## A", [["**ferry**", "0.80 µs", "met"]]))
        self.assertEqual(row_of(out, "**ferry**")[1:], ["0.80 (0.74–0.90) µs", "met"])
        out = summarize(table("## A", [["x", "**1.5**", "a"]]), table("## A", [["x", "**2.5**", "a"]]))
        self.assertEqual(row_of(out, "x")[1], "**2.0 (1.5–2.5)**")

    def test_rows_of_one_name_are_kept_apart(self):
        out = summarize(table("## A", [["dup", "1", "-"], ["dup", "10", "-"]]),
                        table("## A", [["dup", "3", "-"], ["dup", "30", "-"]]))
        self.assertEqual(row_of(out, "dup", 0)[1], "2 (1–3)")
        self.assertEqual(row_of(out, "dup", 1)[1], "20 (10–30)")

    def test_tables_are_matched_by_heading_and_a_missing_one_says_so(self):
        out = summarize(table("## A", [["x", "1", "-"]]) + table("## B", [["x", "1000", "-"]]),
                        table("## B", [["x", "3000", "-"]]))
        a, b = out.index("## A"), out.index("## B")
        self.assertIn("| x | 1 [1 of 2 runs] |", out[a:b])
        self.assertIn("| x | 2000 (1000–3000) |", out[b:])

    def test_verdicts_and_lists_that_differ_are_counted_not_taken_from_the_first_run(self):
        out = summarize(table("## A", [["goal", "1.2 ×", "met"]]), table("## A", [["goal", "5.5 ×", "**missed**"]]),
                        table("## A", [["goal", "1.1 ×", "met"]]))
        self.assertEqual(row_of(out, "goal")[2], "met ×2, **missed** ×1")
        out = summarize(table("## A", [["per", "9.9 9.7", "-"]]), table("## A", [["per", "9.8 9.6", "-"]]))
        self.assertEqual(row_of(out, "per")[1], "9.9 9.7 ×1, 9.8 9.6 ×1")

    def test_units_that_differ_are_not_merged(self):
        out = summarize(table("## A", [["t", "100 µs", "-"]]), table("## A", [["t", "0.5 ms", "-"]]))
        self.assertEqual(row_of(out, "t")[1], "100 µs ×1, 0.5 ms ×1")

    def test_tsv_runs_give_the_median_of_medians_and_the_widest_range(self):
        head = "# bytes\tpath\tcall_us\tcall_min\tcall_max\tdone_us\tdone_min\tdone_max\n"
        out = summarize(head + "4096\tferry\t1\t0.5\t2\t10\t9\t11\n", head + "4096\tferry\t3\t2\t4\t12\t8\t13\n",
                        "4096\tferry\t2\t1\t9\t11\t10\t12\n", tsv=True)
        self.assertEqual(out.splitlines()[0] + "\n", head)
        self.assertEqual(out.splitlines()[1].split("\t"), ["4096", "ferry", "2.000", "0.500", "9.000", "11.000",
                                                           "8.000", "13.000"])


@unittest.skipUnless(shutil.which("gnuplot"), "gnuplot is not installed")
class PlotTest(unittest.TestCase):
    def test_a_title_with_quotes_and_a_path_with_spaces_make_a_png(self):
        with tempfile.TemporaryDirectory(prefix="plot dir ") as d:
            tsv = os.path.join(d, "b.tsv")
            with open(tsv, "w", encoding="utf-8") as f:
                f.write("# h\n4096\tsync\t3\t2\t4\t3\t2\t4\n65536\tsync\t9\t8\t10\t9\t8\t10\n"
                        "4096\tferry\t1\t1\t2\t9\t8\t10\n65536\tferry\t2\t1\t3\t12\t10\t14\n")
            png = os.path.join(d, "out put.png")
            subprocess.run(["bash", os.path.join(ROOT, "bench", "plot.sh"), tsv, png, 'a "quoted" title'], check=True,
                           capture_output=True)
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
