"""Run the whole benchmark suite, one part after the other, each in its own process.

    python -m bench.all [--quick] [--only side_by_side,breakdown,...]

Parts, in order (each also runs alone as `python -m bench.<module>`): `side_by_side` (Torpor
beside restate-server; then again with dynalite as Torpor's store), `breakdown` (where the time goes
in `torpor dev`), `partitions` (requests and write units per invocation, the hottest partition key
and the projected ceiling), `cost` (the cost model beside Step Functions and Lambda durable
functions), `scale` (10,000 invocations over 1,000 keys), `workers` (`torpor dev --workers 1`
beside `--workers 2`), `soak` (`Counter/add` before and after 10,000 invocations), then the older
figures `latency`, `timers` and `aws_requests`, then `sleeps` (sleeps due together and zero-length
sleeps beside restate-server, in request/response mode, then bidirectional; then 1,000 sleeps on the
Lambda path), then `payloads` (64 KiB to 5 MiB round trips beside restate-server). `--quick` passes
`--quick` to the parts that have it and small counts to the others: a smoke run of a few minutes.
The exit status is 1 if any part failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench.common import load
from tests.helpers.services import REPO_ROOT

PARTS = {  # name: (module, arguments, arguments with --quick)
    "side_by_side": ("side_by_side", [], ["--quick"]),
    "side_by_side_dynalite": ("side_by_side", ["--store", "dynalite"], ["--quick", "--store", "dynalite"]),
    "breakdown": ("breakdown", [], ["--quick"]),
    "partitions": ("partitions", [], ["--quick"]),
    "cost": ("cost", [], ["--quick"]),
    "scale": ("scale", [], ["--quick"]),
    "workers": ("workers", [], ["--quick"]),
    "soak": ("soak", [], ["--invocations", "500", "--probe-calls", "50"]),
    "latency": ("latency", ["--calls", "200", "--warmup", "20"], ["--calls", "20", "--warmup", "5"]),
    "timers": ("timers", [], ["--count", "20", "--gap-ms", "250"]),
    "sleeps": ("sleeps", [], ["--quick"]),
    "sleeps_http2": ("sleeps", ["--http2", "--rounds", "1", "--big", "300"], ["--quick", "--http2"]),
    "sleeps_aws": ("sleeps", ["--aws"], ["--aws", "--quick"]),
    "aws_requests": ("aws_requests", ["--runs", "20"], ["--runs", "4"]),
    "payloads": ("payloads", [], ["--rounds", "1", "--sizes", "65536,1048576"]),
}


def main(argv: list[str] | None = None) -> int:
    """Run the chosen parts; print each one's output under a heading with its command and duration."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small runs: a smoke test of the suite")
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts (default: all)")
    args = parser.parse_args(argv)
    failed = []
    for part in args.only.split(","):
        module, full, quick = PARTS[part]
        command = [sys.executable, "-m", f"bench.{module}", *(quick if args.quick else full)]
        print(f"\n# {part}: `python -m bench.{module} {' '.join(command[3:])}`\n\n{load()}", flush=True)
        started = time.monotonic()
        code = subprocess.run(command, cwd=REPO_ROOT, check=False).returncode
        print(f"\n({part}: {time.monotonic() - started:.0f} s, exit status {code})", flush=True)
        if code:
            failed.append(part)
    print(f"\n{'all parts passed' if not failed else 'failed: ' + ', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
