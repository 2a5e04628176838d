"""Value facts: every value a notebook shows, with the label, unit and code line that name it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from nbformat import v4

from conftest import code, result, stream, write_nb
from nbrecall.ingest.chunk import heading_paths, render_cells
from nbrecall.notebook.analysis import analyse
from nbrecall.notebook.facts import Fact, FactLimits, extract_facts
from nbrecall.notebook.outputs import OutputLimits
from nbrecall.notebook.printed import latex_text, leading_number, line_facts
from nbrecall.notebook.read import read_notebook
from nbrecall.notebook.reprs import series_entries


def facts_of(tmp_path: Path, cells: list, limits: FactLimits | None = None, stale: bool = False) -> list[Fact]:
    path = write_nb(tmp_path / "nb.ipynb", cells)
    nb = read_notebook(path)
    analysis = analyse(nb)
    rendered = render_cells(nb, OutputLimits(), analysis.trees)
    return extract_facts(nb, rendered, headings=heading_paths(nb), trees=analysis.trees, stale=stale, limits=limits)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Kp = 5.97 tauI = 2.48 tauD = 0.621", [("Kp", "5.97"), ("tauI", "2.48"), ("tauD", "0.621")]),
        ("Total ballast aft: 1,284.6 m3", [("Total ballast aft", "1,284.6")]),
        # a number between words belongs to the label; a spread and a range are one value each
        ("The interval for Well 2 is 0.200 +/- 0.018, with a range of 0.182, 0.218",
         [("The interval for Well 2", "0.200 +/- 0.018"), ("The interval for Well 2 … a range of", "0.182, 0.218")]),
        ("Sway added mass = 1.12+0.579j", [("Sway added mass", "1.12+0.579j")]),
        ("Beta (U-235) = 0.006504", [("Beta (U-235)", "0.006504")]),
        ("at time 4.02 minutes.", [("at time", "4.02")]),
        ("no numbers here", []),
        # a value whose own segment names nothing is named by all the line says before it
        ("SOR (omega=1.9521): 1110 iterations", [("SOR (omega", "1.9521"), ("SOR (omega=1.9521)", "1110")]),
        # a date or a timestamp names a time series' row; its digits are no values
        ("2012-12-31    0.251344", [("2012-12-31", "0.251344")]),
        ("2019-11-01 04:00:00  6.0", [("2019-11-01 04:00:00", "6.0")]),
        # a spread printed without spaces (the `uncertainties` package) is one value, its unit after it
        ("MAE: 0.170+/-0.002 eV/atom", [("MAE", "0.170+/-0.002")]),
        ("x = 1.2+-0.1 m", [("x", "1.2+-0.1")]),
        # a unit followed by a comma ends a clause: `%time`'s user time is a value, not part of the next label
        ("CPU times: user 1.2 s, sys: 3.1 ms, total: 1.21 s",
         [("CPU times: user", "1.2"), ("sys", "3.1"), ("total", "1.21")]),
        # LightGBM's log: the word after a value that owns the next label (`valid_0's`) is no unit of it
        ("[87]\tvalid_0's auc: 0.912345\tvalid_0's binary_logloss: 0.301234",
         [("", "[87]"), ("valid_0's auc", "0.912345"), ("valid_0's binary_logloss", "0.301234")]),
    ],
)
def test_line_facts(line: str, expected: list[tuple[str, str]]) -> None:
    assert [(label, value) for label, value, _unit, _shown in line_facts(line)] == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("latency: 20ms", [("latency", "20", "ms")]),
        ("mass = 5kg", [("mass", "5", "kg")]),
        ("Speed: 3.2GHz", [("Speed", "3.2", "GHz")]),
        ("dt = 1e-3s", [("dt", "1e-3", "s")]),
        ("Time taken : 12.12s", [("Time taken", "12.12", "s")]),
        ("P = 100kW, Q = 20kvar", [("P", "100", "kW")]),  # `kvar` is no symbol it knows: no value made up
        ("ligand RMSD = 1.35Å", [("ligand RMSD", "1.35", "Å")]),
        ("RMSD = 1.35 Å", [("RMSD", "1.35", "Å")]),
        ("in the 1990s we had 3 ships", [("in the 1990s we had", "3", "ships")]),  # a decade, not 1990 seconds
        ("year = 1990s", []),
        ("running time: 0.8212654160161037s", [("running time", "0.8212654160161037", "s")]),  # no decade
        ("dt: 0.0001s", [("dt", "0.0001", "s")]),
        ("model v2 = 3D", []),  # a digit glued to a name or a letter is no value
        # only where the line says a value follows: not a repr's sizes, a progress bar, a sentence's number
        ("OLR (depth) float64 8B 251.0", [("OLR (depth) float64 8B", "251.0", "")]),
        ("[=====] - 25s 3ms/step - loss: 0.59", [("[=====] - 25s 3ms/step - loss", "0.59", "")]),
        ("the run took 5min", []),
        ("x1 = 4", [("x1", "4", "")]),
    ],
)
def test_a_unit_glued_to_its_number_is_the_value_s_unit(line: str, expected: list[tuple[str, str, str]]) -> None:
    assert [(label, value, unit) for label, value, unit, _shown in line_facts(line)] == expected


@pytest.mark.parametrize(
    ("value", "number"),
    [("1,284.6", 1284.6), ("0.170+/-0.002", 0.17), ("0.200 +/- 0.018", 0.2), ("0.182, 0.218", 0.182),
     ("3 to 5", 3.0), ("[0.95035, 0.96]", None), ("(0.0, 64.0)", None), ("1, 2, 3", None), ("n/a", None)],
)
def test_a_spread_or_a_range_is_led_by_its_first_number(value: str, number: float | None) -> None:
    """What the answer's `computed` form signal reads: one statistic of two numbers is led by its first; a list
    in brackets or of three numbers is none."""
    assert leading_number(value) == number


def test_a_row_of_a_printed_table_does_not_name_its_values_by_the_row_before_them() -> None:
    """Its words are values (`None`): the line-prefix name is for a line that says what its value is."""
    assert line_facts("  2 :  None :  80.0 :  80.0")[-1][:2] == ("", "80.0")


def test_a_resampled_series_with_its_index_name_and_frequency_is_a_series() -> None:
    """`resample('M').mean()` prints the index's name on a line of its own and `Freq: M, ` before the name."""
    lines = ["Date/Time", "2012-01-31    0.240591", "2012-12-31    0.251344", "Freq: M, Name: Weather, dtype: float64"]
    assert series_entries(lines) == ([("2012-01-31", "0.240591"), ("2012-12-31", "0.251344")], "Weather")


def test_a_series_with_a_multiindex_names_each_entry_by_all_its_levels() -> None:
    """`groupby(['learner', 'sim_mode'])[col].median()` prints each outer level once, on its group's first row."""
    frame = pd.DataFrame({"learner": ["R", "R", "S", "S"], "mode": [1, 2, 1, 2],
                          "pehe": [5.1787, 3.9696, 0.3644, 0.8026]})
    text = str(frame.groupby(["learner", "mode"])["pehe"].median()) + "\n"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert series_entries(lines) == ([("R 1", "5.1787"), ("R 2", "3.9696"), ("S 1", "0.3644"), ("S 2", "0.8026")],
                                     "pehe")


def test_units_are_read_after_the_value_and_a_unit_holds_no_second_value() -> None:
    found = line_facts("flow = 922210.2 foot ** 3 / hour")
    assert [(v, u) for _l, v, u, _s in found] == [("922210.2", "foot ** 3 / hour")]
    assert line_facts("Concentration has maximum 1.337 moles/liter")[0][2] == "moles/liter"


@pytest.mark.parametrize(
    ("line", "value", "unit"),
    [("Aquifer influx constant from slope: 147.43 RB/(D-psi)", "147.43", "RB/(D-psi)"),
     ("productivity index: 184.36 RB/D-psi", "184.36", "RB/D-psi"),
     ("torque = 12.5 ft-lbf", "12.5", "ft-lbf"),
     ("heat capacity is 0.24 BTU/(lb °F)", "0.24", "BTU/(lb °F)"),
     ("speed: 3.2 m/s", "3.2", "m/s"),
     ("OIP of reservoir 3: 848.57 million STB", "848.57", "million STB"),
     ("reserves: 1.5 billion scf", "1.5", "billion scf"),
     ("this CSTR must have a volume of 46.7 cubic meters.", "46.7", "cubic meters"),
     ("floor area = 120 square feet", "120", "square feet"),
     ("population 3.2 million", "3.2", "million"),
     # a dot between unit symbols is a product; a file name's extension or an abbreviation is not part of a unit
     ("mean of water viscosity is: 0.893 mPa.s", "0.893", "mPa.s"),
     ("k = 0.04 W/m2.K", "0.04", "W/m2.K"),
     ("EI = 7.5e+05 kN.m^2", "7.5e+05", "kN.m^2"),
     ("saved 16 my_figure.png", "16", "my_figure"),
     ("x = 3 s.t. y", "3", "s"),
     # a product of symbols glued to the number, with a dot, a middle dot or none
     ("T= 312.56N.m", "312.56", "N.m"),
     ("moment: 2.1kN·m", "2.1", "kN·m"),
     ("Torque at the gear, T4=3819.72Nm", "3819.72", "Nm"),
     # a negative power written with a hyphen; a range is not one
     ("intrinsic carrier concentration at 300 K 9.696e+09 cm-3", "9.696e+09", "cm-3"),
     ("decay rate: 0.12 s-1", "0.12", "s-1"),
     ("span: 5 m-10 m", "5", "m"),
     # a units library's name for a unit, lower-case words joined by underscores, may be long
     ("Final air pressure: 250.01 pound_force_per_square_inch", "250.01", "pound_force_per_square_inch"),
     # a capital letter alone after a number is a unit symbol (amperes), not the article
     ("The peak inrush current is 0.808 A.", "0.808", "A"),
     ("n = 4 a day", "4", ""),
     ("1    A", "1", ""),
     ("1 A", "1", "")],
)
def test_a_compound_unit_is_read_whole(line: str, value: str, unit: str) -> None:
    """Engineering units join words with hyphens and put a denominator in brackets: the answer shows all of it,
    not its first word."""
    (found,) = [(v, u) for _l, v, u, _s in line_facts(line)]
    assert found == (value, unit)


def test_a_quantity_of_something_in_a_sentence_is_a_value_shown_with_what_it_is_of() -> None:
    """`21.88 roods of wheat.` ends a clause as `4.02 minutes.` does: a value, not a number naming something."""
    assert line_facts("We should plant 21.88 roods of wheat.") == [
        ("We should plant", "21.88", "roods", "We should plant 21.88 roods of wheat")]
    found = line_facts("is equivalent to: 918.05 scf of gas. 100 STB is equivalent to: 91805.01 scf of gas")
    assert [(v, s) for _l, v, _u, s in found] == [("918.05", "is equivalent to: 918.05 scf of gas"),
                                                 ("91805.01", "100 STB is equivalent to: 91805.01 scf of gas")]
    # words that go on past three are the next clause, not what the value is of
    assert all(not shown.endswith("first pass")
               for _l, _v, _u, shown in line_facts("it took 12 s of the time budget for the first pass"))


def test_a_range_between_two_numbers_is_one_value() -> None:
    found = line_facts("the next measurement will be between 16.093 and 16.107")
    assert [(label, value) for label, value, _u, _s in found] == [("the next measurement will be between",
                                                                   "16.093 and 16.107")]
    assert leading_number("16.093 and 16.107") == 16.093
    # two values joined by `and` without `between` stay two
    assert [v for _l, v, _u, _s in line_facts("x = 3 and y = 4")] == ["3", "4"]


def test_latex_rows_of_a_handcalcs_block() -> None:
    latex = (r"\[\begin{aligned}\lambda_{y} &= \frac{ \beta \cdot L }{ i_{y} } = \frac{ 1 \cdot 3 }{ 0.115 } "
             r"&= 25.981 \; \;\textrm{(Schlankheitsgrad)}\\[10pt]e_{0} &= 3.0 \cdot 0.0025 &= 0.0075 \; "
             r"\;\textrm{(m)}\end{aligned}\]")
    rows = latex_text(latex).splitlines()
    assert rows[0].startswith("lambda_y = ") and rows[0].endswith("25.981 (Schlankheitsgrad)")
    assert rows[1].endswith("= 0.0075 (m)")


def test_printed_values_get_the_names_of_what_printed_them(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, [
        v4.new_markdown_cell("# Tuning\n## Ziegler-Nichols\nThe tuning rules give the PID settings."),
        code('print("Kp = {0:0.3g}".format(Kp))\nprint(rmse)', 1, [stream("Kp = 5.97\n41424.4\n")]),
    ])
    kp, rmse = facts
    assert (kp.label, kp.value, kp.shown, kp.code) == ("Kp", "5.97", "Kp = 5.97", 'print("Kp = {0:0.3g}".format(Kp))')
    assert (rmse.label, rmse.value, rmse.code) == ("rmse", "41424.4", "print(rmse)")
    assert kp.heading == "Tuning › Ziegler-Nichols" and kp.sentence == "The tuning rules give the PID settings."
    assert kp.cell == 1 and kp.cell_id and kp.number == 5.97


def test_a_result_is_named_by_its_expression_and_a_dict_by_its_keys(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, [
        code("vessel.R_tot", 1, [result("146.2086", 1)]),
        code("env.configuration", 2, [result("{'columns': 7, 'rows': 6}", 2)]),
    ])
    shown = [(f.origin, f.label, f.value) for f in facts]
    assert ("result", "vessel.R_tot", "146.2086") in shown
    assert ("result", "env.configuration", "{'columns': 7, 'rows': 6}") in shown
    assert ("entry", "'rows'", "6") in shown
    assert next(f for f in facts if f.label == "vessel.R_tot").shown == "vessel.R_tot = 146.2086"


def test_a_dict_pretty_printed_over_several_lines_is_still_one_dict(tmp_path: Path) -> None:
    # IPython prints a dict wider than the console one entry per line; each key still names its value
    facts = facts_of(tmp_path, [
        code("main_effects", 1, [result("{'x1': 0.4046972807643724,\n 'x2': 0.3009852695451654,\n"
                                        " 'x3': -0.0023884465643922046}", 1)]),
    ])
    shown = [(f.origin, f.label, f.value) for f in facts]
    assert ("entry", "'x2'", "0.3009852695451654") in shown, shown
    assert ("entry", "'x3'", "-0.0023884465643922046") in shown, shown
    assert not any(f.label.startswith("{") for f in facts), shown


def test_a_numpy_2_scalar_repr_is_read_as_its_number(tmp_path: Path) -> None:
    # NumPy 2 prints a scalar as `np.float64(0.93)`; NumPy 1 printed `0.93`: the value is the number either way
    facts = facts_of(tmp_path, [
        code("activity.uci_at()", 1, [result("np.float64(7.565835814419223)", 1)]),
        code("print('channels', chans)", 2, [stream("channels [np.int64(108), np.int64(227)]\n")]),
        code("stats", 3, [result("{'TIB': np.float64(49.0), 'SPT': np.float64(28.0)}", 3)]),
    ])
    shown = [(f.origin, f.label, f.value, f.number) for f in facts]
    assert ("result", "activity.uci_at()", "7.565835814419223", 7.565835814419223) in shown, shown
    assert any(f.value == "[108, 227]" for f in facts), shown
    assert ("entry", "'TIB'", "49.0", 49.0) in shown, shown


def test_a_sympy_result_drawn_as_png_keeps_its_text(tmp_path: Path) -> None:
    out = v4.new_output("execute_result", execution_count=1, data={
        "image/png": "iVBORw0KGgo=", "text/latex": r"$\displaystyle \left\{ A : 4, \  B : -2\right\}$",
        "text/plain": "{A: 4, B: -2}"})
    facts = facts_of(tmp_path, [code("coeffs", 1, [out])])
    assert [f.value for f in facts][:1] == ["{A: 4, B: -2}"]
    assert ("B", "-2") in [(f.label, f.value) for f in facts]


def test_a_formula_drawn_over_several_lines_is_one_value_in_its_latex_not_fragments(tmp_path: Path) -> None:
    """sympy's pretty print raises an exponent a line above its base: read line by line it is `⋅ℯ  ⋅sin(2`."""
    drawn = "   -t         \n5⋅ℯ  ⋅sin(2⋅t)"
    out = v4.new_output("execute_result", execution_count=1, data={
        "text/latex": r"$\displaystyle 5 e^{- t} \sin{\left(2 t \right)}$", "text/plain": drawn})
    one_line = v4.new_output("execute_result", execution_count=2, data={
        "text/latex": r"$\displaystyle \left\{ A : 4\right\}$", "text/plain": "{A: 4}"})
    facts = facts_of(tmp_path, [code("h", 1, [out]), code("coeffs", 2, [one_line])])
    assert [(f.origin, f.label, f.value) for f in facts if f.cell == 0] == [
        ("result", "h", r"5 e^{- t} \sin{\left(2 t \right)}")]
    assert next(f for f in facts if f.cell == 0).shown == r"h = 5 e^{- t} \sin{\left(2 t \right)}"
    assert ("A", "4") in [(f.label, f.value) for f in facts if f.cell == 1]  # a one-line text stays as it was read


def test_a_timeit_report_is_one_duration_named_by_the_statement_it_timed(tmp_path: Path) -> None:
    """`%timeit` prints a duration, its spread and how often it ran, wrapped over two lines; read as words and
    numbers it was four values named by fragments (`± 0 ns per loop (mean ± std. dev. of`)."""
    new = stream("34.5 ms ± 59.4 µs per loop (mean ± std. dev. of 7 runs,\n    10 loops each)\n")
    old = stream("1000 loops, best of 3: 4.6 ms per loop\n")
    two = [stream("5.45 s ± 18.6 ms per loop (mean ± std. dev. of 7 runs, 1 loop each)\n"),
           stream("3.59 s +- 0 ns per loop (mean +- std. dev. of 1 run, 1 loop each)\nspeed-up: 1.52\n")]
    long = stream("1min 3s ± 2.1 s per loop (mean ± std. dev. of 7 runs, 1 loop each)\n")
    facts = facts_of(tmp_path, [code("%timeit mandelbrot_numba(size, iterations)", 1, [new]),
                                code("%%timeit -n 10\ntotal = sum_lists(a, b)", 2, [old]),
                                code("%timeit slow(x)\n%timeit fast(x)\nprint('speed-up:', 1.52)", 3, two),
                                code("%timeit -r 7 train(model)", 4, [long])])
    assert [(f.cell, f.label, f.value, f.unit) for f in facts] == [
        (0, "time per loop", "34.5", "ms"), (1, "time per loop", "4.6", "ms"), (2, "time per loop", "5.45", "s"),
        (2, "time per loop", "3.59", "s"), (2, "speed-up", "1.52", ""),
        (3, "time per loop", "1min 3s", "")]  # over a minute: the duration as printed, not its seconds alone
    first = facts[0]
    assert first.shown == "34.5 ms ± 59.4 µs per loop (mean ± std. dev. of 7 runs, 10 loops each)"
    assert first.code == "%timeit mandelbrot_numba(size, iterations)"
    assert first.names == "mandelbrot_numba size iterations"
    assert facts[1].names == "total sum_lists a b"  # the cell magic times the body below it
    assert [f.code for f in facts[2:4]] == ["%timeit slow(x)", "%timeit fast(x)"]


def test_a_table_with_a_latex_twin_is_still_read_from_its_text(tmp_path: Path) -> None:
    """A version table (`%version_information`) writes a `tabular`, not a formula: its rows stay values."""
    out = v4.new_output("execute_result", execution_count=1, data={
        "text/latex": "\\begin{tabular}{|l|l|}\\hline\nnumpy & 1.9 \\\\ \\hline\n\\end{tabular}",
        "text/plain": "Software Version\nnumpy 1.9"})
    facts = facts_of(tmp_path, [code("%version_information numpy", 1, [out])])
    assert ("numpy", "1.9") in [(f.label, f.value) for f in facts]


def test_table_cells_series_entries_and_printed_tables(tmp_path: Path) -> None:
    frame = pd.DataFrame({"volume_m3": [1284.6, 1501.4], "tank": ["T1", "T2"]},
                         index=pd.Index(["aft", "mid"], name="zone"))
    series = pd.Series([160131, 152000], index=["Thursday", "Monday"], name="Berri")
    facts = facts_of(tmp_path, [
        code("summary", 1, [result(frame.to_string(), 1, html=frame.to_html())]),
        code("counts", 2, [result(series.to_string() + "\nName: Berri, dtype: int64", 2)]),
        code("print(table)", 3, [stream(" N  |  m11 |  m22\n 16 | 1.88 | -2.73\n 64 | 0.87 | -0.22\n")]),
    ])
    labels = {(f.origin, f.label): f.value for f in facts}
    assert labels[("table", "aft · volume_m3")] == "1284.6"
    assert labels[("entry", "Thursday · Berri")] == "160131"
    assert labels[("table", "N 64 · m11")] == "0.87"  # the index column's header names its values


def test_a_sweep_table_names_each_row_by_its_parameter(tmp_path: Path) -> None:
    """A sweep printed as a table (`EbNo [dB] | BER | ... | status`): each row is named by the parameter its first
    column holds, not by a status text that is the same in every row; pandas' row numbers (no header) still give way
    to a row's text."""
    sweep = ("EbNo [dB] |        BER | block errors |    status\n"
             "-------------------------------------------------\n"
             "      0.0 | 7.8639e-02 |        10000 |reached target block errors\n"
             "      2.0 | 3.6021e-05 |          290 |reached target block errors\n")
    frame = pd.DataFrame({"name": ["ridge", "lasso"], "rmse": [1.234, 2.5]})
    facts = facts_of(tmp_path, [
        code("sim(ebno_dbs)", 1, [stream(sweep)]),
        code("scores", 2, [result(frame.to_string(), 2, html=frame.to_html())]),
    ])
    labels = {f.label: f.value for f in facts if f.origin == "table"}
    assert labels["EbNo [dB] 2.0 · BER"] == "3.6021e-05"
    assert not any("reached target" in label for label in labels)
    assert labels["lasso · rmse"] == "2.500"


# What tabulate (`psql`, `fancy_grid`), prettytable, rich (Keras 3's model summary) and polars print: tables drawn
# with borders, written out here as those libraries print them.
_PSQL = """+---------+--------+-----+
| model   |   rmse |   n |
|---------+--------+-----|
| ridge   |  1.234 |  10 |
| lasso   |  2.5   |  20 |
+---------+--------+-----+
"""
_FANCY = """╒═════════╤════════╤═════╕
│ model   │   rmse │   n │
╞═════════╪════════╪═════╡
│ ridge   │  1.234 │  10 │
├─────────┼────────┼─────┤
│ lasso   │  2.5   │  20 │
╘═════════╧════════╧═════╛
"""
_POLARS = """shape: (3, 3)
┌───────┬───────┬─────┐
│ model ┆ rmse  ┆ n   │
│ ---   ┆ ---   ┆ --- │
│ str   ┆ f64   ┆ i64 │
╞═══════╪═══════╪═════╡
│ ridge ┆ 1.234 ┆ 10  │
│ …     ┆ …     ┆ …   │
│ lasso ┆ 2.5   ┆ 20  │
└───────┴───────┴─────┘"""
_KERAS = """Model: "sequential"
┏━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━┳━━━━━━━━━┓
┃ Layer (type)      ┃ Output Shape ┃ Param # ┃
┡━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━━┩
│ dense (Dense)     │ (None, 64)   │   4,160 │
├───────────────────┼──────────────┼─────────┤
│ dense_1 (Dense)   │ (None, 1)    │      65 │
└───────────────────┴──────────────┴─────────┘
 Total params: 4,225 (16.50 KB)
"""


@pytest.mark.parametrize("printed", [_PSQL, _FANCY, _POLARS, _KERAS], ids=["psql", "fancy_grid", "polars", "keras"])
def test_a_table_drawn_with_borders_names_each_number_by_its_row_and_column(tmp_path: Path, printed: str) -> None:
    facts = facts_of(tmp_path, [code("print(results)", 1, [stream(printed)])])
    labels = {f.label: f.value for f in facts if f.origin == "table"}
    if printed is _KERAS:
        assert labels == {"dense (Dense) · Param #": "4,160", "dense_1 (Dense) · Param #": "65"}, labels
        assert ("Total params", "4,225") in [(f.label, f.value) for f in facts]
    else:
        assert labels == {"ridge · rmse": "1.234", "ridge · n": "10", "lasso · rmse": "2.5", "lasso · n": "20"}, labels


def test_a_drawn_table_s_header_is_what_its_rule_says(tmp_path: Path) -> None:
    # PyTorch Lightning's rich tables: a first row with no number (`42.4 K`) is no header, and a header may hold a
    # number (`DataLoader 0`); the rule under the header says where it ends
    summary = ("┏━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━┓\n"
               "┃   ┃ Name      ┃ Type       ┃ Params ┃\n"
               "┡━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━┩\n"
               "│ 0 │ _backbone │ Backbone   │ 42.4 K │\n"
               "│ 1 │ _head     │ Sequential │    252 │\n"
               "│ 2 │ loss      │ MSELoss    │      0 │\n"
               "└───┴───────────┴────────────┴────────┘\n")
    metrics = ("┏━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━┓\n"
               "┃  Test metric   ┃ DataLoader 0 ┃\n"
               "┡━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━┩\n"
               "│ test_accuracy  │  0.878411054 │\n"
               "│   test_loss    │  0.299856305 │\n"
               "└────────────────┴──────────────┘\n")
    facts = facts_of(tmp_path, [code("trainer.fit(model)", 1, [stream(summary)]),
                                code("trainer.test(model)", 2, [stream(metrics)])])
    labels = {f.label: f.value for f in facts if f.origin == "table"}
    assert labels == {"_head Sequential · Params": "252", "loss MSELoss · Params": "0",
                      "test_accuracy · DataLoader 0": "0.878411054", "test_loss · DataLoader 0": "0.299856305"}, labels


def test_a_drawn_table_whose_last_column_is_often_empty_keeps_its_columns(tmp_path: Path) -> None:
    # andes prints its parameters so: a row alone ending in `|` has an empty last cell, not an outer rule
    printed = (" Name |     Description     | Default | Unit | Properties\n"
               "------+---------------------+---------+------+-----------\n"
               " u    | connection status   | 1       | bool |\n"
               " Sn   | Power rating        | 100     | MVA  | power\n"
               " xd1  | d-axis transient    | 0.302   |      |\n")
    labels = {f.label: f.value for f in facts_of(tmp_path, [code("print(GENCLS.doc())", 1, [stream(printed)])])
              if f.origin == "table"}
    assert labels == {"u · Default": "1", "Sn · Default": "100", "xd1 · Default": "0.302"}, labels


def test_pipes_inside_values_under_a_rule_are_no_table(tmp_path: Path) -> None:
    # BLAST's hit list: `|` inside the ids, no space beside them, is no column rule
    printed = ("         ----  -----  ------------------------------\n"
               "            0      1  gi|731339628|ref|XM_010682658.1|  Beta vulgaris\n"
               "            1      1  gi|568824607|ref|XM_006466626.1|  Citrus sinensis\n"
               "            2      1  gi|567866318|ref|XM_006425719.1|  Citrus clementina\n")
    facts = facts_of(tmp_path, [code("print(blast_qresult)", 1, [stream(printed)])])
    assert not [f for f in facts if f.origin == "table"], facts


def test_boxes_that_are_no_table_are_read_line_by_line(tmp_path: Path) -> None:
    # iminuit's fit report draws boxes around `name = value` pairs: not a grid, so each pair is read as printed
    printed = ("┌──────────────────────────────┬──────────────────────────┐\n"
               "│ FCN = -7168                  │         Nfcn = 1835      │\n"
               "│ EDM = 1.7e-05 (Goal: 0.0002) │        time = 1.0 sec    │\n"
               "└──────────────────────────────┴──────────────────────────┘\n")
    values = {f.value for f in facts_of(tmp_path, [code("m.migrad()", 1, [stream(printed)])])}
    assert {"-7168", "1835", "1.7e-05"} <= values, values


def test_a_polars_frame_shown_as_html_is_named_by_its_columns_not_its_types(tmp_path: Path) -> None:
    # polars' HTML: a second header row of column types and quoted strings (written as polars 1.x writes it)
    html = ('<div><small>shape: (2, 2)</small><table border="1" class="dataframe"><thead><tr><th>model</th>'
            '<th>rmse</th></tr><tr><td>str</td><td>f64</td></tr></thead><tbody><tr><td>&quot;ridge&quot;</td>'
            '<td>1.234</td></tr><tr><td>&quot;lasso&quot;</td><td>2.5</td></tr></tbody></table></div>')
    facts = facts_of(tmp_path, [code("df", 1, [result(_POLARS, 1, html=html)])])
    labels = {f.label: f.value for f in facts if f.origin == "table"}
    assert labels == {"ridge · rmse": "1.234", "lasso · rmse": "2.5"}, labels


def test_a_table_printed_as_aligned_text_names_each_number_by_its_row_and_column(tmp_path: Path) -> None:
    """`print(classification_report(...))`, a regression summary and `print(df)` align each number under its
    column's name; read line by line, a row's numbers ran together into one value named by the row alone."""
    report = ("              precision    recall  f1-score   support\n\n"
              "           0       0.93      0.96      0.95        27\n"
              "           1       0.94      0.91      0.92        33\n\n"
              "    accuracy                           0.93        60\n"
              "   macro avg       0.93      0.94      0.93        60\n")
    summary = ("==============================================================================\n"
               "Dep. Variable:                      y   R-squared:                       0.933\n"
               "==============================================================================\n"
               "                 coef    std err          t      P>|t|      [0.025      0.975]\n"
               "------------------------------------------------------------------------------\n"
               "const         -0.0081      0.020     -0.413      0.680      -0.047       0.031\n"
               "x1             0.4512      0.023     19.601      0.000       0.406       0.496\n"
               "==============================================================================\n")
    frame = pd.DataFrame({"porosity": [0.12, 0.311], "perm md": [10, 3000]}, index=pd.Index(["A", "C"], name="Well"))
    facts = facts_of(tmp_path, [
        code("print(classification_report(y_test, y_pred))", 1, [stream(report)]),
        code("print(results.summary())", 2, [stream(summary)]),
        code("print(wells)", 3, [stream(str(frame) + "\nKp = 5.97 tauI = 2.48\n")]),
    ])
    named = {(f.cell, f.label): (f.value, f.origin) for f in facts}
    assert named[(0, "1 · recall")] == ("0.91", "table")
    assert named[(0, "accuracy · f1-score")] == ("0.93", "table")  # a row with empty columns keeps its place
    assert named[(0, "macro avg · recall")] == ("0.94", "table")
    assert named[(1, "x1 · coef")] == ("0.4512", "table")
    assert named[(1, "x1 · std err")] == ("0.023", "table")
    assert named[(1, "const · P>|t|")] == ("0.680", "table")
    # `label: value` pairs are no column names: that line is read as a line
    assert [(f.value, f.origin) for f in facts if f.label.endswith("R-squared")] == [("0.933", "line")]
    assert named[(2, "C · perm md")] == ("3000", "table")  # pandas' line for the index's name is skipped
    assert named[(2, "tauI")] == ("2.48", "line")  # the line after the table is read as a line again
    assert not [f for f in facts if f.origin == "line" and " " in f.value.strip()]  # no numbers run together


def test_a_long_printout_is_read_for_values_beyond_the_head_and_tail_the_index_keeps(tmp_path: Path) -> None:
    """A flight or fit report prints dozens of lines; the index keeps its head and tail, its values are read whole."""
    filler = "".join(f"stage {chr(97 + i)}: nominal\n" for i in range(25))
    report = filler + "Rail departure time: 9.604 s\n" + filler
    facts = facts_of(tmp_path, [code("flight.prints.all()", 1, [stream(report)])])
    assert ("Rail departure time", "9.604", "s") in [(f.label, f.value, f.unit) for f in facts]
    cut = facts_of(tmp_path, [code("flight.prints.all()", 1, [stream(report)])], limits=FactLimits(stream_lines=20))
    assert "Rail departure time" not in [f.label for f in cut]  # beyond the bound: its head and tail halves


def test_the_last_of_a_repeated_label_is_final(tmp_path: Path) -> None:
    lines = "".join(f"iteration {i}: flow = {1000 - i}.5\n" for i in range(5))
    facts = facts_of(tmp_path, [code("for i in range(5):\n    print(...)", 1, [stream(lines)])])
    flows = [f for f in facts if f.label.endswith("flow")]
    assert [f.final for f in flows] == [False, False, False, False, True] and flows[-1].value == "996.5"


def test_a_label_a_loop_prints_under_several_headers_is_named_by_each_block_header(tmp_path: Path) -> None:
    """`Integrating High-sensitivity RCM` / `The ECS is 3.57 K`, then the low-sensitivity block: each ECS is named
    by its block; a label printed once, or under one header only, keeps its own name."""
    log = ("Results\nIntegrating High-sensitivity RCM\nThe TOA imbalance is 3.11e-05 W/m2\nThe ECS is 3.57 K\n\n"
           "Integrating Low-sensitivity RCM\nThe TOA imbalance is 2.22e-04 W/m2\nThe ECS is 2.22 K\n"
           "Done after 2 models\n")
    facts = facts_of(tmp_path, [code("for rcm in models:\n    print(...)", 1, [stream(log)])])
    named = {(f.label, f.value) for f in facts}
    assert ("Integrating High-sensitivity RCM · The ECS", "3.57") in named
    assert ("Integrating Low-sensitivity RCM · The ECS", "2.22") in named
    assert ("Integrating Low-sensitivity RCM · The TOA imbalance", "2.22e-04") in named
    assert ("Done after", "2") in named  # printed once: its own name
    same = "Settings\nflow = 1.5\nflow = 2.5\n"  # one header over every printout: a log, named as printed
    assert [f.label for f in facts_of(tmp_path, [code("print(...)", 1, [stream(same)])])] == ["flow", "flow"]
    log = "".join(f"{sample}\nValidation perplexity: {9 - i * 0.5}\n"
                  for i, sample in enumerate(["unvaouc oxchyw zpkla", "one son vit even", "theory of the game"]))
    named = [f.label for f in facts_of(tmp_path, [code("train()", 1, [stream(log)])])]
    assert set(named) == {"Validation perplexity"}  # generated samples, not one template: a log, named as printed


def test_constants_the_code_sets_are_input_facts(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, [code("RHO_SW = 1.025  # sea water density [t/m3]\nL = 20*u.foot", 1)])
    assert [(f.origin, f.label, f.value, f.unit) for f in facts] == [
        ("input", "RHO_SW (sea water density [t/m3])", "1.025", ""), ("input", "L", "20", "foot")]
    assert facts[0].shown == "RHO_SW = 1.025  # sea water density [t/m3]"


def test_noise_and_object_reprs_are_not_values(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, [
        code("df.dtypes", 1, [result("dtype('float64')", 1)]),
        code("plt.plot(x)", 2, [result("[<matplotlib.lines.Line2D at 0x7f3>]", 2)]),
        code("x", 3, [result("<__main__.Note at 0x7f00>", 3)]),
    ])
    assert facts == []


def test_bounds_keep_a_cells_first_and_last_values_and_results_over_tables(tmp_path: Path) -> None:
    lines = "".join(f"step {i}: loss {i}.25\n" for i in range(100))
    frame = pd.DataFrame({f"c{j}": [float(j + i) for i in range(10)] for j in range(10)})
    limits = FactLimits(per_cell=10, per_table=8, per_notebook=12)
    facts = facts_of(tmp_path, [
        code("summary", 1, [result(frame.to_string(), 1, html=frame.to_html())]),
        code("train()", 2, [stream(lines)]),
    ], limits=limits)
    steps = [f.value for f in facts if f.origin == "line" and f.label.endswith("loss")]
    assert len(facts) == 12 and steps[0] == "0.25" and steps[-1] == "99.25"  # the last line is the result
    assert sum(f.origin == "table" for f in facts) == 2  # tables give way first


def test_over_the_notebook_bound_a_later_result_outlasts_training_logs_and_values_that_name_nothing(
    tmp_path: Path,
) -> None:
    """Epoch lines repeat their labels (only each cell's last is `final`) and a bare `1719/1719` names nothing: they
    give way before a result further down the notebook, which document order alone would cut."""
    log = "".join(f"epoch {i}: loss {i}.25 - accuracy 0.{i}1\n" for i in range(1, 9))
    cells = [code(f"fit({k})", k, [stream(log)]) for k in range(1, 4)]
    cells.append(code("progress()", 4, [stream("1719/1719\n")]))
    cells.append(code("accuracy", 5, [result("0.8717", 5)]))
    facts = facts_of(tmp_path, cells, limits=FactLimits(per_cell=24, per_notebook=12))
    assert len(facts) == 12
    assert ("accuracy", "0.8717") in [(f.label, f.value) for f in facts]
    assert [f.value for f in facts if f.label == "loss" and f.final] == ["8.25"] * 3  # each log's last step
    assert "1719/1719" not in [f.value for f in facts]


def test_facts_of_stale_outputs_say_so(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, [code("x", 1, [result("3.5", 1)])], stale=True)
    assert facts and all(f.stale for f in facts)


def test_a_long_name_in_capitals_after_a_number_is_no_unit() -> None:
    """A dataset's id after a Series index (`11    IOOS_Raw_One_Min_Water_Level`) is not a units library's name."""
    assert all(unit != "IOOS_Raw_One_Min_Water_Level"
               for _l, _v, unit, _s in line_facts("id: 11 IOOS_Raw_One_Min_Water_Level"))


def test_a_units_library_quantity_is_its_magnitude_with_its_unit(tmp_path: Path) -> None:
    """pint, astropy and unyt show a quantity as a repr; the value is its magnitude and the unit its name."""
    found = facts_of(tmp_path, [
        code("C_r.ito(kN)\nu_round(C_r, 1)", 1, [result("134.7 <Unit('kilonewton')>", 1)]),
        code("Q", 2, [result("<Quantity(24410.948, 'gallon / minute')>", 2)]),
        code("print(f'ratio {lam}')", 3, [stream("ratio 1.394 <Unit('dimensionless')>\n")]),
        code("F", 4, [result("<Quantity 12.5 kN>", 4)]),
        code("v", 5, [result("unyt_quantity(3.2, 'm/s')", 5)]),
    ])
    got = [(f.cell, f.label, f.value, f.unit, f.number) for f in found]
    assert (0, "u_round(C_r, 1)", "134.7", "kilonewton", 134.7) in got
    assert (1, "Q", "24410.948", "gallon / minute", 24410.948) in got
    assert (2, "ratio", "1.394", "", 1.394) in got
    assert (3, "F", "12.5", "kN", 12.5) in got
    assert (4, "v", "3.2", "m/s", 3.2) in got
    assert not any("Quantity" in f.shown or "<Unit" in f.shown for f in found)


def test_a_pint_quantity_is_read_as_its_html_shows_it_with_every_digit(tmp_path: Path) -> None:
    """pint's repr rounds to nine digits; Jupyter shows the HTML, which holds them all and the unit's symbol."""
    found = facts_of(tmp_path, [
        code("u = float(u.rhs) * m / s\nu", 1,
             [result("<Quantity(5450.10092, 'meter / second')>", 1, html="5450.100916496868 m/s")]),
        code("L / D", 2, [result("<Quantity(5.67128182, 'dimensionless')>", 2, html="5.671281819617711")]),
        # not the same number, or markup: the repr is read as before
        code("p", 3, [result("<Quantity(2.5, 'bar')>", 3, html="7.1 bar")]),
        code("q", 4, [result("<Quantity(1.25, 'kilonewton')>", 4, html="<b>1.2500001</b> kN")]),
        code("T", 5, [result("<Quantity(4840.0, 'degree_Rankine')>", 5, html="4839.999999999999 °R")]),
    ])
    got = {(f.label, f.value, f.unit) for f in found}
    assert ("u", "5450.100916496868", "m/s") in got
    assert ("L / D", "5.671281819617711", "") in got
    assert ("p", "2.5", "bar") in got
    assert ("q", "1.25", "kilonewton") in got
    assert ("T", "4840.0", "degree_Rankine") in got  # a float's noise is no extra digit


def test_the_bound_keeps_named_values_before_unlabelled_rows(tmp_path: Path) -> None:
    """A solver's log or a printed matrix fills a cell's bound with unlabelled rows; the named result between them
    and the cell's own result are kept first."""
    rows = "".join(f"[{i}.0 {i + 1}.0 {i + 2}.0]\n" for i in range(10))
    found = facts_of(tmp_path, [
        code("run()\nshape", 1, [stream(rows + "minimum margin = 15.279\nk-effective = 0.966 +/- 0.010\n" + rows),
                                 result("(12761, 4)", 1)]),
    ], limits=FactLimits(per_cell=4))
    kept = [(f.label, f.value) for f in found]
    assert ("minimum margin", "15.279") in kept and ("k-effective", "0.966 +/- 0.010") in kept
    assert ("shape", "(12761, 4)") in kept
    assert len(kept) == 4 and [f.position for f in found] == sorted(f.position for f in found)


def _kernel_facts(tmp_path: Path, language: str, cells: list) -> list[Fact]:
    path = write_nb(tmp_path / f"{language}.ipynb", cells, {"kernelspec": {"name": language, "language": language,
                                                                            "display_name": language}})
    nb = read_notebook(path)
    analysis = analyse(nb)
    rendered = render_cells(nb, OutputLimits(), analysis.trees)
    return extract_facts(nb, rendered, headings=heading_paths(nb), trees=analysis.trees)


def test_an_r_notebook_s_values_are_read_without_the_index_r_prints(tmp_path: Path) -> None:
    facts = _kernel_facts(tmp_path, "R", [
        code("tanks <- c(aft = 1284.6, fwd = 1017.0)\ntotal_ballast <- sum(tanks)\ntotal_ballast", 1,
             [result("[1] 2301.6", 1)]),
        code("rho <- 1.025  # sea water\nprint(rho)", 2, [stream("[1] 1.025\n")]),
        code('print(paste("Total:", 3803))', 3, [stream('[1] "Total: 3803"\n')]),
        code("x <- 1:3\nx", 4, [result("[1] 1 2 3", 4)]),
    ])
    shown = {(f.label, f.value) for f in facts}
    assert ("total_ballast", "2301.6") in shown and next(f for f in facts if f.label == "total_ballast").number
    assert ("rho", "1.025") in shown and ("rho (sea water)", "1.025") in shown  # printed, and set with `<-`
    assert ("Total", "3803") in shown
    assert not any(f.value.startswith("[1]") for f in facts if f.label != "x")  # no value keeps the index
    assert ("x", "[1] 1 2 3") in shown  # a longer vector stays as printed


def test_a_kernel_that_displays_assignments_names_the_value_by_the_variable(tmp_path: Path) -> None:
    frame = ("2×2 DataFrame\n Row │ vessel  ballast_t\n     │ String  Float64\n─────┼───────────────────\n"
             "   1 │ PSV        3803.0\n   2 │ AHTS       2100.0")
    julia = _kernel_facts(tmp_path, "julia", [code("tension_kn = 812.5", 1, [result("812.5", 1)]),
                                              code("T = size(x, 1)   # number of observations", 2, [result("388", 2)]),
                                              code('n = length("C#")', 3, [result("2", 3)]),
                                              code("fleet", 4, [result(frame, 4)])])
    assert [(f.label, f.shown) for f in julia if f.origin == "result"] == [
        ("tension_kn", "tension_kn = 812.5"), ("T (number of observations)", "T (number of observations) = 388"),
        ("n", "n = 2")]  # a `#` inside a string is no comment
    # a DataFrames.jl table: its types line and rule are no names or rows
    assert {(f.label, f.value) for f in julia if f.cell == 3} == {("PSV · ballast_t", "3803.0"),
                                                                  ("AHTS · ballast_t", "2100.0")}
    # Python's printouts are read as before: `[1]` there is a list, and an assignment displays nothing (a result
    # under one is another kernel's or a stale output), so neither rule applies
    python = facts_of(tmp_path, [code("print([1], 3803)", 1, [stream("[1] 3803\n")]),
                                 code("x = 5", 2, [result("5", 2)])])
    assert ("", "[1]") in {(f.label, f.value) for f in python}
    assert ("result", "x = 5") in {(f.origin, f.label) for f in python}


R_FRAME_HTML = """<table class="dataframe">
<caption>A data.frame: 2 × 3</caption>
<thead>
\t<tr><th></th><th scope=col>vessel</th><th scope=col>length_m</th><th scope=col>ballast_t</th></tr>
\t<tr><th></th><th scope=col>&lt;chr&gt;</th><th scope=col>&lt;dbl&gt;</th><th scope=col>&lt;dbl&gt;</th></tr>
</thead>
<tbody>
\t<tr><th scope=row>1</th><td>PSV </td><td>130</td><td>3803</td></tr>
\t<tr><th scope=row>2</th><td>AHTS</td><td> 90</td><td>2100</td></tr>
</tbody>
</table>
"""


def test_r_tables_and_named_vectors_are_read_by_their_names(tmp_path: Path) -> None:
    summary = "   Min. 1st Qu.  Median    Mean 3rd Qu.    Max. \n   2100    2526    2952    2952    3377    3803 "
    tibble = "# A tibble: 2 × 2\n  vessel ballast_t\n  <chr>      <dbl>\n1 PSV         3803\n2 AHTS        2100"
    facts = _kernel_facts(tmp_path, "R", [
        code("fleet", 1, [result("  vessel length_m ballast_t\n1 PSV 130 3803\n2 AHTS 90 2100", 1,
                                 html=R_FRAME_HTML)]),
        code("summary(fleet$ballast_t)", 2, [result(summary, 2)]),
        code("coef(fit)", 3, [result("(Intercept)           x \n  1.2345678   0.9876543 ", 3)]),
        code("as_tibble(fleet)", 4, [result(tibble, 4)]),
        code("print(fleet)", 5, [stream("  vessel length_m ballast_t\n1    PSV      130      3803\n"
                                        "2   AHTS       90      2100\n")]),
        code("summary(lm(dist ~ speed, data = cars))", 6, [stream(
            "Coefficients:\n"
            "            Estimate Std. Error t value Pr(>|t|)    \n"
            "(Intercept) -17.5791     6.7584  -2.601   0.0123 *  \n"
            "speed         3.9324     0.4155   9.464 1.49e-12 ***\n"
            "---\n"
            "Residual standard error: 15.38 on 48 degrees of freedom\n")]),
        code("one_column", 7, [result("   x\n1 10\n2 20", 7)]),
    ])
    shown = {(f.cell, f.label, f.value) for f in facts}
    assert (0, "PSV · ballast_t", "3803") in shown  # IRkernel's line of column types is no level of names
    assert {(1, "Mean", "2952"), (1, "1st Qu.", "2526"), (1, "Max.", "3803")} <= shown
    assert {(2, "(Intercept)", "1.2345678"), (2, "x", "0.9876543")} <= shown
    assert not any(f.cell == 6 and f.label.split()[-1] in ("1", "10") for f in facts)  # rows, not names
    tibble_facts = [f for f in facts if f.cell == 3]
    assert (3, "PSV · ballast_t", "3803") in shown  # the row under its name, the notes and the types line left out
    assert not any(f.label.startswith("#") or "<" in f.label or f.value in ("2 × 2", "×") for f in tibble_facts)
    assert {(4, "PSV · length_m", "130"), (4, "AHTS · ballast_t", "2100")} <= shown  # one space between columns
    # a regression's coefficients: names with a space in them, found by where the right-aligned values end
    assert {(5, "speed · Estimate", "3.9324"), (5, "(Intercept) · Std. Error", "6.7584"),
            (5, "speed · t value", "9.464"), (5, "Residual standard error", "15.38")} <= shown
    # a Python printout of the same shape stays as it was read before
    python = facts_of(tmp_path, [code("print(s)", 1, [stream(summary + "\n")])])
    assert not any(f.label == "Mean" for f in python)


def test_a_matlab_scalar_shown_under_its_name_is_named_by_it(tmp_path: Path) -> None:
    shown = "\nballast =\n\n   3.8030e+03\n\n\nA =\n\n     1     2\n     3     4\n\nrho =\n\n    1.0250\n\n"
    facts = _kernel_facts(tmp_path, "matlab", [code("ballast = sum(v)\nA = [1 2; 3 4]\nrho = 1.025", 1,
                                                    [stream(shown)])])
    named = {(f.label, f.value) for f in facts}
    assert {("ballast", "3.8030e+03"), ("rho", "1.0250")} <= named
    assert not any(f.label == "A" for f in facts)  # a matrix stays as printed



def test_an_r_result_above_a_closing_assignment_is_not_named_by_it(tmp_path: Path) -> None:
    # IRkernel shows every visible top-level value; an assignment is invisible, so the result is the line above's
    facts = _kernel_facts(tmp_path, "R", [code("mean_draft\nlimit = 12", 1, [result("[1] 7.45", 1)])])
    assert not any(f.label == "limit" and f.value == "7.45" for f in facts)
