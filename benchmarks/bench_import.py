"""Benchmark of huge traces and sacct answers (issue 40): run by hand, not a test.

    python benchmarks/bench_import.py [--cases swf,sacct,answer,tres,names,trace-tres] [--lines 1000000]
        [--mb 50] [--runs 3] [--baseline CHECKOUT ...] [--check] [--profile CASE]

The inputs, written to benchmarks/data/ the first time (seeded, so every
run reads the same bytes):

- swf: an SWF trace of --lines jobs (`simulate --workload` reads it with
  `sim.importers.load_workload`);
- sacct: a `sacct -P` trace of --lines jobs, with the header and columns
  the importer documents (JobID,Account,User,Submit,Start,End,Elapsed,
  Timelimit,State,AllocTRES,ReqTRES; dates as sacct writes them), read by
  `load_workload`;
- answer: the daemon's `sacct --parsable2` answer of --lines allocations
  (epoch times), read by `slurm.sacct.parse_sacct_answer` (its bootstrap
  of the decayed past);
- tres: one line of that answer whose AllocTRES is --mb MB of entries
  (`cpu=1,mem=1G,gres/gpu=2,...` over and over);
- names: one such line of distinct typed GRES (`gres/g1:t=1,gres/g2:t=1,...`)
  of --mb/500 MB and twice that: the second time over the first says
  whether reading grows linearly (about 2) or not (about 4);
- trace-tres: a `sacct -P` trace of one job whose AllocTRES is --mb MB
  (`load_workload`).

Every run is a new process (`--one CASE FILE`) that times the reading in
CPU time (a trace from its file, as `simulate --workload` reads it; an
answer of sacct from its text, read before) and reports its peak RSS
(VmHWM, the interpreter's own 30-40 MiB included): one run of
each case in turn, --runs rounds, and the median of each. With --baseline
CHECKOUT (another copy of the code, e.g. `git archive HEAD slurm_drf | tar
-x -C BASE`, BASE an empty directory; again for more, each named by its directory) the same
runs take turns with that checkout first on PYTHONPATH. --check compares
what each read (a digest of every job, or of every allocation, or the
error); --profile CASE runs the case in this process under cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import os
import pstats
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
CASES = ("swf", "sacct", "answer", "tres", "names", "trace-tres")
START = 1_796_000_000  # 2026-11-30, seconds since the epoch
# What cli.main sets for every verb (gc.set_threshold), `simulate --workload` among them.
CLI_GC_THRESHOLD: Final = (200_000, 50, 1000)
TRACE_HEADER = "JobID|Account|User|Submit|Start|End|Elapsed|Timelimit|State|AllocTRES|ReqTRES\n"


def _clock(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _date(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))


def write_swf(path: Path, lines: int) -> None:
    rng = random.Random(1)
    with path.open("w") as out:
        out.write("; MaxNodes: 1000\n; MaxProcs: 64000\n")
        submit = 0
        for number in range(1, lines + 1):
            submit += rng.randint(0, 30)
            processors = rng.choice((1, 2, 4, 8, 16, 32, 64, 128))
            memory = rng.choice((-1, 1024, 4096))
            user, group = rng.randint(1, 200), rng.randint(1, 50)
            runtime = rng.randint(60, 7200)
            out.write(
                f"{number} {submit} 5 {runtime} {processors} -1 -1 {processors} 7200 {memory} 1 {user} {group} "
                "-1 1 1 -1 -1\n"
            )


def write_sacct(path: Path, lines: int) -> None:
    rng = random.Random(1)
    with path.open("w") as out:
        out.write(TRACE_HEADER)
        submit = START
        for number in range(1000, 1000 + lines):
            submit += rng.randint(0, 30)
            start = submit + rng.randint(0, 600)
            elapsed = rng.randint(60, 7200)
            cpu = rng.choice((1, 2, 4, 8, 16, 32))
            gpus = rng.choice(("", "", ",gres/gpu=1", ",gres/gpu:a100=2,gres/gpu=2"))
            tres = f"billing={cpu},cpu={cpu}{gpus},mem={cpu * 4}G,node=1"
            out.write(
                f"{number}|acct{rng.randint(0, 49)}|u{rng.randint(0, 199)}|{_date(submit)}|{_date(start)}|"
                f"{_date(start + elapsed)}|{_clock(elapsed)}|04:00:00|COMPLETED|{tres}|{tres}\n"
            )


def write_answer(path: Path, lines: int) -> None:
    rng = random.Random(1)
    with path.open("w") as out:
        start = START
        for number in range(1000, 1000 + lines):
            start += rng.randint(0, 30)
            cpu = rng.choice((1, 2, 4, 8, 16, 32))
            end = start + rng.randint(60, 7200)
            out.write(f"{number}|acct{rng.randint(0, 49)}|main|{start}|{end}|billing={cpu},cpu={cpu},mem={cpu}G\n")


def _repeated(size: int) -> str:
    unit = "cpu=1,mem=1G,gres/gpu=2,"
    return (unit * (size // len(unit) + 1))[:size].rstrip(",").rpartition(",")[0]


def _distinct_names(size: int) -> str:
    items: list[str] = []
    length = 0
    while length < size:
        items.append(f"gres/g{len(items)}:t=1")
        length += len(items[-1]) + 1
    return ",".join(items)


def write_tres(path: Path, tres: str) -> None:
    path.write_text(f"7|physics|main|{START}|{START + 3600}|{tres}\n")


def write_trace_tres(path: Path, size: int) -> None:
    date, later = _date(START), _date(START + 3600)
    path.write_text(
        f"{TRACE_HEADER}7|physics|alice|{date}|{date}|{later}|01:00:00|02:00:00|COMPLETED|{_repeated(size)}|\n"
    )


def ensure_inputs(case: str, lines: int, megabytes: float) -> list[Path]:
    """The case's input files in benchmarks/data/, written the first time."""
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    size = int(megabytes * 1_000_000)
    if case == "names":
        small = max(size // 500, 1000)
        paths = [data / f"import-names-{small}.txt", data / f"import-names-{2 * small}.txt"]
        for path, length in zip(paths, (small, 2 * small), strict=True):
            if not path.exists():
                write_tres(path, _distinct_names(length))
        return paths
    name = {
        "swf": f"import-{lines}.swf",
        "sacct": f"import-sacct-{lines}.txt",
        "answer": f"import-answer-{lines}.txt",
        "tres": f"import-tres-{size}.txt",
        "trace-tres": f"import-trace-tres-{size}.txt",
    }[case]
    path = data / name
    if not path.exists():
        if case == "swf":
            write_swf(path, lines)
        elif case == "sacct":
            write_sacct(path, lines)
        elif case == "answer":
            write_answer(path, lines)
        elif case == "tres":
            write_tres(path, _repeated(size))
        else:
            write_trace_tres(path, size)
    return [path]


TRACES: Final = ("swf", "sacct", "trace-tres")


def reader(case: str) -> Callable[[str, str], object]:
    """What reads the case's file (its path; its text, read before the clock starts, for an answer of
    sacct): the code on sys.path, this checkout or the baseline. A trace is read from its file, as
    `simulate --workload` reads it."""
    if case in TRACES:
        from slurm_drf.sim.importers import load_workload

        fmt = "swf" if case == "swf" else "sacct"
        return lambda path, text: load_workload(path, fmt)
    from slurm_drf.slurm.sacct import parse_sacct_answer

    return lambda path, text: parse_sacct_answer(text)


def digest(result: object) -> str:
    """A digest of what was read: every job of a workload, or every allocation and skipped line."""
    jobs = getattr(result, "jobs", None)
    if jobs is not None:
        shown = repr((jobs, result.node_count, result.node_type, result.notes))  # type: ignore[attr-defined]
    else:
        shown = repr((result.allocations, result.skipped))  # type: ignore[attr-defined]
    return hashlib.sha256(shown.encode()).hexdigest()[:16]


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().split("\n"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one(case: str, path: str) -> None:
    """Run the case once in this process; print CPU seconds, peak RSS in MiB and a digest (or the error).

    The cyclic collector runs as in `slurm-drf simulate` (cli.main's threshold): a million records
    are millions of objects that all live to the end, which Python's default threshold walks again
    and again.
    """
    gc.set_threshold(*CLI_GC_THRESHOLD)
    read = reader(case)
    text = "" if case in TRACES else Path(path).read_text(encoding="utf-8")
    start = time.process_time()
    try:
        result = read(path, text)
    except Exception as error:  # a bench reports what the code did, failures included
        seconds = time.process_time() - start
        outcome = f"{type(error).__name__}: {str(error)[:100]}"
    else:
        seconds = time.process_time() - start  # the digest, outside the reading's time
        outcome = digest(result)
    print(f"{seconds:.3f} {peak_rss_mib():.0f} {outcome}")


def environment(path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["PYTHONPATH"] = str(path)
    return env


def run(case: str, path: Path, env: dict[str, str]) -> tuple[float, float, str]:
    answer = subprocess.run(
        [sys.executable, __file__, "--one", case, str(path)], env=env, check=True, capture_output=True, text=True
    ).stdout.split(" ", 2)
    return float(answer[0]), float(answer[1]), answer[2].strip()


def profile(case: str, path: Path) -> None:
    read = reader(case)
    text = "" if case in TRACES else path.read_text(encoding="utf-8")
    profiler = cProfile.Profile()
    profiler.runcall(read, str(path), text)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of " + ", ".join(CASES))
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--mb", type=float, default=50.0, help="size of the one long AllocTRES (tres, trace-tres)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--baseline",
        metavar="CHECKOUT",
        action="append",
        default=[],
        help="another copy of the code to take turns with (again for more; each named by its directory)",
    )
    parser.add_argument("--check", action="store_true", help="say whether this code and each baseline read the same")
    parser.add_argument("--profile", metavar="CASE", choices=CASES, help="profile this case in this process")
    parser.add_argument("--one", nargs=2, metavar=("CASE", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(*args.one)
        return
    cases = [case for case in args.cases.split(",") if case]
    if args.profile:
        profile(args.profile, ensure_inputs(args.profile, args.lines, args.mb)[-1])
        return
    sides = {"this": environment(CHECKOUT)}
    for baseline in args.baseline:
        sides[Path(baseline).resolve().name] = environment(Path(baseline).resolve())
    inputs = {case: ensure_inputs(case, args.lines, args.mb) for case in cases}
    runs = measure(inputs, sides, args.runs)
    report(runs, inputs, sides, check=args.check)


# (case, file name, side) -> each run's (CPU seconds, peak RSS in MiB, digest or error)
Runs = dict[tuple[str, str, str], list[tuple[float, float, str]]]


def measure(inputs: dict[str, list[Path]], sides: dict[str, dict[str, str]], rounds: int) -> Runs:
    """Every case's files on every side, one run each in turn, `rounds` times."""
    runs: Runs = {}
    for _ in range(rounds):
        for case, paths in inputs.items():
            for path in paths:
                for side, env in sides.items():
                    runs.setdefault((case, path.name, side), []).append(run(case, path, env))
    return runs


def report(runs: Runs, inputs: dict[str, list[Path]], sides: dict[str, dict[str, str]], check: bool) -> None:
    for (case, name, side), measured in runs.items():
        seconds = [m[0] for m in measured]
        size = (HERE / "data" / name).stat().st_size / 1e6
        print(
            f"{case:10} {name:32} {size:7.1f} MB  {side:8}  CPU median {statistics.median(seconds):7.2f} s "
            f"(runs {', '.join(f'{v:.2f}' for v in seconds)})  peak RSS {max(m[1] for m in measured):6.0f} MiB  "
            f"{measured[-1][2]}"
        )
    if "names" in inputs:
        for side in sides:
            small, large = (statistics.median(m[0] for m in runs[("names", p.name, side)]) for p in inputs["names"])
            print(f"names, {side}: twice the line takes {large / small:.1f}x the time")
    for side in list(sides)[1:] if check else ():
        for case, paths in inputs.items():
            for path in paths:
                same = runs[(case, path.name, "this")][-1][2] == runs[(case, path.name, side)][-1][2]
                print(f"{case} {path.name}: this and {side} read {'the same' if same else 'DIFFERENTLY'}")


if __name__ == "__main__":
    main()
