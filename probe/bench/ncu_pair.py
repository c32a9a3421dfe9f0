#!/usr/bin/env python3
"""ncu_pair.py A.csv B.csv — two Nsight Compute runs of the same program side by side, launch by
launch: the CSVs that `ab_ncu.sh` keeps in $AB_NCU_KEEP (`ncu --csv --page details`), e.g. one run
without statistics and one with them. A kernel's launches are paired by their order in each run
(its name without template arguments, so that a kernel's plain and fusing instances pair up); each
line shows both launches' name, grid, duration (µs), DRAM and SM throughput (% of peak), achieved
occupancy (%), registers and warp cycles per issued instruction."""
import csv
import re
import sys

METRICS = ["Duration", "DRAM Throughput", "Compute (SM) Throughput", "Achieved Occupancy",
           "Registers Per Thread", "Warp Cycles Per Issued Instruction"]
SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def launches(path):
    """The run's launches in order: dicts of name, grid and the metrics above."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own messages start with ==
    by_id = {}
    for row in csv.DictReader(lines):
        launch = by_id.setdefault(int(row["ID"]), {
            "name": re.sub(r"^void |\(.*$| ", "", row["Kernel Name"]),
            "grid": row["Grid Size"].replace(" ", "")})
        try:
            value = float(row["Metric Value"].replace(",", ""))
        except ValueError:
            continue
        if row["Metric Name"] == "Duration":
            value *= SCALE.get(row["Metric Unit"], 1.0)
        launch[row["Metric Name"]] = value
    return [by_id[k] for k in sorted(by_id)]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: ncu_pair.py A.csv B.csv")
    runs = []
    for path in sys.argv[1:]:
        try:
            run = launches(path)
        except OSError as e:
            sys.exit(f"ncu_pair.py: cannot read {path}: {e.strerror}")
        except (KeyError, ValueError) as e:
            sys.exit(f"ncu_pair.py: {path}: not an ncu CSV of --page details (no {e})")
        if not run:
            sys.exit(f"ncu_pair.py: {path}: no kernel launches in it (not ncu's --csv output?)")
        by_kernel = {}
        for launch in run:
            by_kernel.setdefault(launch["name"].split("<")[0], []).append(launch)
        runs.append(by_kernel)
    a, b = runs

    def cell(launch):
        return "%-34s %-12s" % (launch["name"][:34], launch["grid"][:12]) + "".join(
            "%7.1f" % launch.get(m, 0.0) for m in METRICS)

    print("%-47s%s" % ("", "     us  dram%    sm%   occ%   regs cyc/is"))
    for kernel, first in a.items():
        second = b.get(kernel, [])
        print(f"== {kernel}: {len(first)} launches in A, {len(second)} in B")
        for x, y in zip(first, second):
            print(cell(x), " | ", cell(y))


if __name__ == "__main__":
    main()
