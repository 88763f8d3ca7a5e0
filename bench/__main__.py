"""Run the benchmark: ``.venv/bin/python -m bench [options]`` from the repository root.

    .venv/bin/python -m bench [--size-mb 1024] [--only read-seq,metadata]
                              [--random-ops 20000] [--tmp-dir /var/tmp]
                              [--profile DIR]

Each section (bench/sections.py) prints its figures as it goes; a table of all of
them ends the run. Exit status: 0 when every target is met, 1 when one is missed,
2 when the benchmark (or a section of it) could not run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench import profiling
from bench.context import Bench
from bench.results import BenchError, Result, print_result, print_table
from bench.sections import SECTIONS
from bench.sequential import READERS


def run(bench: Bench, names: list[str]) -> tuple[list[Result], dict[str, str]]:
    """Each named section in turn; a section that fails keeps what it measured."""
    results: list[Result] = []
    errors: dict[str, str] = {}
    for name in names:
        print(f"\n{name}")
        try:
            section = SECTIONS[name].run(bench)
        except (BenchError, OSError) as e:
            errors[name] = str(e)
            print(f"  ERROR: {e}", file=sys.stderr)
            section = e.results if isinstance(e, BenchError) else []
        for r in section:
            print_result(r)
        results += section
    return results, errors


def check_tools() -> str | None:
    for tool in ("dd", "ls", "fusermount3"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist"
    return None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark zarrfs against zarr-python 3, tensorstore and a "
        "memory-serving FUSE ceiling, side by side in the same run (docs/benchmarks.md).",
        epilog="sections, in run order:\n"
        + "\n".join(f"  {s.name:<13} {s.summary}" for s in SECTIONS.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--size-mb", type=int, default=1024, help="array size (default 1024)")
    parser.add_argument("--only", default=None, help="comma list of: " + ",".join(SECTIONS))
    parser.add_argument(
        "--random-ops",
        type=int,
        default=20000,
        help="random 4 KiB reads and writes (default 20000)",
    )
    parser.add_argument(
        "--tmp-dir",
        type=Path,
        default=Path("/var/tmp"),
        help="where the stores go, on disk (default /var/tmp)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="DIR",
        help="record the zarrfs daemon with perf during each measured read, write and "
        "listing; reports in DIR (bench/profiling.py)",
    )
    args = parser.parse_args()
    if args.size_mb < READERS or args.random_ops < 1:
        parser.error(f"--size-mb must be >= {READERS}, --random-ops >= 1")
    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else []
    names = names or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    if not args.tmp_dir.is_dir():
        parser.error(f"--tmp-dir {args.tmp_dir} is not a directory")
    args.sections = names
    return args


def main() -> int:
    args = parse_args()
    problem = check_tools()
    if problem:
        print(f"bench: error: {problem}", file=sys.stderr)
        return 2
    if args.profile is not None:
        try:
            profiling.enable(args.profile.resolve())
        except (BenchError, OSError) as e:
            print(f"bench: error: {e}", file=sys.stderr)
            return 2
        print(
            f"profiles in {args.profile}: perf's sampling takes CPU from the daemons it "
            "records, so the figures of this run are for finding where time goes, not "
            "for comparing"
        )
    try:
        work = Path(tempfile.mkdtemp(prefix="zarrfs-bench-", dir=args.tmp_dir.resolve()))
    except OSError as e:
        print(f"bench: error: cannot create a directory in {args.tmp_dir}: {e}", file=sys.stderr)
        return 2
    print(
        f"stores under {work}; reads see the compressed store files warm in the OS page "
        "cache (each store is read once beforehand: dropping caches is not portable)"
    )
    try:
        results, errors = run(Bench(work, args.size_mb, args.random_ops), args.sections)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(results, errors)
    if errors:
        print("\nsome sections could not run: " + ", ".join(errors))
        return 2
    missed = [r.section for r in results if not r.passed]
    print("\nall targets met" if not missed else "\nMISSED: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
