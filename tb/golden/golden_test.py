#!/usr/bin/python3
"""The golden comparator's rules (tb/golden/golden.py), on a real golden: a one-cycle change is
caught and shown, energies and ratios may move by less than 1e-9 relative, structure changes are
named. Run by ctest as Golden.ComparatorCatchesOneCycleAndToleratesRoundOff (label golden)."""
import copy
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402


class Comparator(unittest.TestCase):
    def setUp(self):
        case = next(iter(golden.cases(with_rtl=False)))
        with open(golden.golden_path(case)) as f:
            self.golden = json.load(f)

    def test_an_unchanged_report_has_no_differences(self):
        self.assertEqual(golden.differences(self.golden, copy.deepcopy(self.golden)), [])

    def test_one_cycle_more_is_a_difference_shown_with_its_change(self):
        now = copy.deepcopy(self.golden)
        now["totals"]["cycles"] += 1
        diffs = golden.differences(self.golden, now)
        self.assertEqual([d[0] for d in diffs], ["totals.cycles"])
        table = golden.format_differences(diffs)
        self.assertIn("totals.cycles", table)
        self.assertIn(f"{self.golden['totals']['cycles']:,}", table)
        self.assertIn("+1 (", table)

    def test_whole_numbers_written_as_floats_compare_exactly(self):
        layer = self.golden["layers"][0]
        self.assertIsInstance(layer["cycles"], float)
        now = copy.deepcopy(self.golden)
        now["layers"][0]["cycles"] += 1.0
        self.assertEqual([d[0] for d in golden.differences(self.golden, now)],
                         [f"layers[{layer['name']}].cycles"])

    def test_energies_may_move_by_less_than_the_relative_tolerance(self):
        e = self.golden["totals"]["energy_j"]
        now = copy.deepcopy(self.golden)
        now["totals"]["energy_j"] = e * (1 + golden.RELATIVE_TOLERANCE / 10)
        self.assertEqual(golden.differences(self.golden, now), [])
        now["totals"]["energy_j"] = e * (1 + golden.RELATIVE_TOLERANCE * 10)
        self.assertEqual([d[0] for d in golden.differences(self.golden, now)],
                         ["totals.energy_j"])

    def test_added_removed_and_retyped_fields_are_named(self):
        now = copy.deepcopy(self.golden)
        del now["totals"]["macs"]
        now["totals"]["new_figure"] = 1
        now["accuracy"]["bit_exact"] = not self.golden["accuracy"]["bit_exact"]
        now["layers"].pop()
        paths = [d[0] for d in golden.differences(self.golden, now)]
        last = self.golden["layers"][-1]["name"]
        self.assertEqual(sorted(paths), sorted(["totals.macs", "totals.new_figure",
                                                "accuracy.bit_exact", f"layers[{last}]"]))


if __name__ == "__main__":
    unittest.main()
