"""What a section returns: one ``Result`` per figure, and the table they make.

A figure is compared with its reference from the same run (a ratio against a
target), with a fixed target, or shown beside a reference with no target (what
bounds it). A figure may carry its ``bound``: what was measured beside it that says
what limits it (each side's CPU per MiB, the FUSE ceiling with the same access
mode); a missed figure is printed with it. ``BenchError`` is a section that could
not run; it carries what the section measured before, which is reported all the
same.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Result:
    section: str
    figure: str
    reference: str
    ratio: float | None
    target: str
    passed: bool
    bound: str = ""  # what limits the figure, as measured in the same run


class BenchError(Exception):
    """The benchmark could not run; the message says why. ``results``: what the section
    measured before it failed, reported all the same."""

    def __init__(self, message: str, results: list[Result] | None = None) -> None:
        super().__init__(message)
        self.results = results or []


def fmt(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}" if value >= 1000 else f"{value:.1f} {unit}"


def versus(
    section: str, value: float, reference: float, unit: str, target: float, bound: str = ""
) -> Result:
    """``value`` over ``reference`` (both higher-is-better) against a ratio target."""
    ratio = value / reference
    return Result(
        section,
        fmt(value, unit),
        fmt(reference, unit),
        ratio,
        f">= {target}x",
        ratio >= target,
        bound,
    )


def reference(section: str, value: float, ref: float, unit: str, kind: str = "reference") -> Result:
    """``value`` beside ``ref`` (a ratio, no target): what bounds a figure or explains it."""
    return Result(section, fmt(value, unit), fmt(ref, unit), value / ref, f"({kind})", True)


def at_least(section: str, value: float, unit: str, target: float, bound: str = "") -> Result:
    passed = value >= target
    return Result(section, fmt(value, unit), "-", None, f">= {fmt(target, unit)}", passed, bound)


def below(
    section: str, value: float, unit: str, target: float, strict: bool = True, bound: str = ""
) -> Result:
    passed = value < target if strict else value <= target
    sign = "<" if strict else "<="
    return Result(
        section, fmt(value, unit), "-", None, f"{sign} {fmt(target, unit)}", passed, bound
    )


def cpu_per_mib(name: str, seconds: float, mb: float) -> str:
    """``name`` 1.23 ms CPU/MiB: a side's CPU seconds over the MiB it moved."""
    return f"{name} {1000 * seconds / mb:.2f} ms CPU/MiB"


def print_result(r: Result) -> None:
    ratio = f"  ratio {r.ratio:.2f}x" if r.ratio is not None else ""
    reference = f"  vs {r.reference}" if r.reference != "-" else ""
    verdict = "PASS" if r.passed else "MISS"
    print(f"  {r.section}: {r.figure}{reference}{ratio}  (target {r.target})  {verdict}")
    if r.bound and not r.passed:
        print(f"    bound: {r.bound}")


def print_table(results: list[Result], errors: dict[str, str]) -> None:
    header = ("section", "zarrfs", "reference", "ratio", "target", "result")
    rows = [header]
    for r in results:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        rows.append(
            (r.section, r.figure, r.reference, ratio, r.target, "PASS" if r.passed else "MISS")
        )
    rows += [(name, "-", "-", "-", "-", "ERROR") for name in errors]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    print()
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    missed = [r for r in results if not r.passed]
    if missed:
        print(
            "\nwhat bounds each missed figure, measured in this run (where the time goes:"
            " python -m bench --profile DIR; docs/benchmarks.md)"
        )
        for r in missed:
            print(f"  {r.section}: {r.bound or 'no bound measured'}")
