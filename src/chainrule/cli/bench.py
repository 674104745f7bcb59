"""``chainrule bench``: every workload on every installed engine, one table."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from .options import CommandError
from .preflight import check_output_file


def register(subparsers: Any) -> None:
    from ..bench import WORKLOADS

    names = [w.name for w in WORKLOADS]
    p = subparsers.add_parser(
        "bench",
        help="time chainrule against micrograd on the standard workloads",
        description="Run every workload for every installed engine in this process "
        "(warm-up, repetitions, median) and print times and ratios. "
        f"Workloads: {', '.join(names)}.",
    )
    p.add_argument("--quick", action="store_true", help="fewer repetitions: a short run")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    p.add_argument(
        "--workload",
        action="append",
        choices=names,
        metavar="NAME",
        help="run only this workload (repeatable)",
    )
    p.add_argument("--repeat", type=int, metavar="N", help="timed runs per engine")
    p.add_argument("--warmup", type=int, metavar="N", help="untimed runs before them")
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="threads for both sides of gpt-sizes and cnn-step (BLAS and PyTorch; default 2)",
    )
    # Tiny sizes, the same workloads: for the test suite.
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from .. import bench

    if args.json:  # before the run, not after it
        check_output_file(Path(args.json), "--json")
    settings = bench.QUICK_SETTINGS if args.quick else bench.FULL_SETTINGS
    if args.tiny:
        settings = dataclasses.replace(settings, sizes=bench.TINY, label=settings.label + ", tiny")
    if args.repeat is not None:
        if args.repeat < 1:
            print("chainrule bench: --repeat must be at least 1", file=sys.stderr)
            return 2
        settings = dataclasses.replace(settings, repeat=args.repeat)
    if args.warmup is not None:
        if args.warmup < 0:
            print("chainrule bench: --warmup must be at least 0", file=sys.stderr)
            return 2
        settings = dataclasses.replace(settings, warmup=args.warmup)
    if args.threads is not None:
        if args.threads < 1:
            print("chainrule bench: --threads must be at least 1", file=sys.stderr)
            return 2
        sizes = dataclasses.replace(settings.sizes, gpt_sweep_threads=args.threads)
        settings = dataclasses.replace(settings, sizes=sizes)
    workloads = [w for w in bench.WORKLOADS if not args.workload or w.name in args.workload]

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    results = bench.run(workloads, settings, progress)
    print(bench.header(settings, workloads))
    print()
    print(bench.table(workloads, results))
    print()
    print("median: seconds per run; memory: bytes per operation (tracemalloc).")
    print("ratio: the baseline's median divided by the engine's.")
    print("load: the 1-minute load average before and after the engine's runs.")
    note = bench.load_note(results)
    if note:
        print(note)
    for line in bench.install_hints(workloads, results):
        print(line)
    if args.json:
        try:
            bench.write_json(args.json, bench.to_json(workloads, results, settings))
        except OSError as e:  # a full disk: the path itself was checked before the run
            raise CommandError(f"cannot write {args.json} ({e.strerror or e})") from None
        print(f"wrote {args.json}")
    return 0
