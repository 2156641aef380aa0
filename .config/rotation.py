#!/usr/bin/env python3
"""Which long tests `./x test` runs this time, within a time budget.

On 2 cores under TCG the whole suite takes ~32 min of tests, most of it in
a dozen long VM tests (a users'-CI job six times over, the ArrowSAM
workflow in every placement, a compare of 18 boots...). `./x test` runs
every test whose measured time is under LONG_SECONDS, and of the long ones
as many as fit in a budget, chosen in this order (the model is ktstr's
KTSTR_BUDGET_SECS: a budget, and the choice printed):

  1. a long test that failed the last time it ran on this machine;
  2. a long test that never ran on this machine, or whose file changed
     since it last passed here;
  3. the least recently run here; ties (a fresh machine knows nothing)
     broken by a hash of the test and the commit count, so that successive
     commits take turns.

The budget is a cap: a long test that does not fit waits for its turn,
and one longer than the whole budget runs only with `./x test --full` (or
TESTBED_TEST_BUDGET=all, or a bigger budget, as `.ci/run` gives). The rest
are named, with when they last ran here. A test's time is the last one
measured on this machine (the state file keeps it for each long test; the
last run's junit file for the others), else docs/phases/test-costs.tsv (a
measured run, kept by `./x times --keep`): a test that took 424 s here is
not planned at the 224 s another machine measured.

With a deadline (--deadline, epoch seconds: `./x test` gives an hour after
its start, `.ci/run` its job's end, through TESTBED_DEADLINE) the budget is also cut to what is left once the
short tests (their measured times added up, as if one ran at a time) and
the smoke reproduce after them (AFTER_TESTS_SECONDS) are taken out: a cold
machine, whose builds took most of the job, runs fewer long tests rather
than overrunning it.

  rotation.py select --costs TSV [--junit XML] --state JSON --budget S|all
                     [--add-cost 'BINARY TEST=SECONDS']... [--deadline EPOCH]
      prints a nextest filterset for the tests to leave out ("" for none)
  rotation.py record --junit XML --state JSON --costs TSV
      notes when each long test ran and how it ended
  rotation.py keep --junit XML --costs TSV
      merges a run's measured times into the costs file
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

LONG_SECONDS = 60.0
# What `./x test` does after the tests (reproduce smoke-latency --quick and
# the Chromium check of its report), with room to spare.
AFTER_TESTS_SECONDS = 300.0


def log(msg):
    print("[x] " + msg, file=sys.stderr)


def read_costs(path):
    """(binary, test) -> (seconds, source file) from the kept costs."""
    costs = {}
    if not os.path.exists(path):
        return costs
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("#") or not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 4:
                sys.exit("%s:%d: expected binary, test, seconds, file (tab-separated)" % (path, n))
            binary, test, secs, source = fields
            try:
                costs[(binary, test)] = (float(secs), source)
            except ValueError:
                sys.exit("%s:%d: seconds: %r is not a number" % (path, n, secs))
    return costs


def read_junit(path):
    """(binary, test) -> (seconds, passed) from a nextest junit file."""
    out = {}
    if not path or not os.path.exists(path):
        return out
    for case in ET.parse(path).iter("testcase"):
        failed = any(c.tag in ("failure", "error") for c in case)
        out[(case.get("classname"), case.get("name"))] = (float(case.get("time", 0)), not failed)
    return out


def source_files():
    """binary id -> the file (or, for a library's unit tests, the directory)
    it is built from, relative to the workspace, from `cargo metadata`."""
    try:
        out = subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    meta = json.loads(out)
    root = meta["workspace_root"] + "/"
    files = {}
    for p in meta["packages"]:
        for t in p["targets"]:
            src = t["src_path"].removeprefix(root)
            if "lib" in t["kind"] or "proc-macro" in t["kind"]:
                files[p["name"]] = os.path.dirname(src)
            elif "test" in t["kind"]:
                files["%s::%s" % (p["name"], t["name"])] = src
            else:
                files["%s::%s/%s" % (p["name"], t["kind"][0], t["name"])] = src
    return files


def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def load_state(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def changed_since(commit, source):
    """Whether `source` differs between `commit` and the work tree."""
    if not commit or not source:
        return True
    return git("diff", "--name-only", commit, "--", source) != "" or git("cat-file", "-t", commit) == ""


def select(args):
    costs = read_costs(args.costs)
    for key, (secs, _) in read_junit(args.junit).items():
        if key in costs:
            costs[key] = (secs, costs[key][1])
    state = load_state(args.state)
    # This machine's last time for each long test, whichever run it was in.
    for key in costs:
        seen = state.get(key[0] + " " + key[1])
        if seen and "seconds" in seen:
            costs[key] = (float(seen["seconds"]), costs[key][1])
    # What a test costs beyond its own time on this machine (a kernel that
    # only it boots, not yet built): "binary test=seconds".
    for extra in args.add_cost:
        name, _, secs = extra.rpartition("=")
        binary, _, test = name.partition(" ")
        if (binary, test) in costs:
            was, source = costs[(binary, test)]
            costs[(binary, test)] = (was + float(secs), source)
    long_tests = {k: v for k, v in costs.items() if v[0] >= LONG_SECONDS}
    if args.budget == "all":
        budget = float("inf")
    else:
        try:
            budget = float(args.budget)
        except ValueError:
            sys.exit("TESTBED_TEST_BUDGET: %r is neither seconds nor 'all'" % args.budget)
    if args.deadline is not None:
        short = sum(v[0] for k, v in costs.items() if k not in long_tests)
        time_left = max(0.0, args.deadline - time.time() - short - AFTER_TESTS_SECONDS)
        if time_left < budget:
            log("tests: the long-test budget is cut to %.0f s: the job ends at %s (its deadline: TEST_DEADLINE_MINUTES in ./x, or TESTBED_DEADLINE), "
                "and the short tests (%.0f s) and what follows them (%.0f s) come first"
                % (time_left, time.strftime("%H:%M:%S UTC", time.gmtime(args.deadline)), short, AFTER_TESTS_SECONDS))
            budget = time_left
    if budget == float("inf") or not long_tests:
        log("tests: every test (no budget)")
        return ""
    turn = git("rev-list", "--count", "HEAD") or "0"

    def order(item):
        (binary, test), (_, source) = item
        seen = state.get(binary + " " + test)
        rotation = hashlib.sha256((binary + test + turn).encode()).hexdigest()
        if seen and not seen.get("passed", True):
            return (0, "", rotation)
        if not seen or changed_since(seen.get("commit", ""), source):
            return (1, "", rotation)
        return (2, seen.get("ran", ""), rotation)

    chosen, left, used = [], [], 0.0
    for key, (secs, source) in sorted(long_tests.items(), key=order):
        if used + secs <= budget:
            chosen.append(key)
            used += secs
        else:
            left.append(key)
    total = sum(v[0] for v in long_tests.values())
    log("tests: every test under %.0f s, and %d of the %d long ones (%.0f s of a %.0f s budget; all would take %.0f s):"
        % (LONG_SECONDS, len(chosen), len(long_tests), used, budget, total))
    for b, t in chosen:
        log("  runs     %5.0f s  %s %s" % (long_tests[(b, t)][0], b, t))
    for b, t in left:
        seen = state.get(b + " " + t)
        when = ("last ran here %s at %s, %s" % (seen["ran"], seen.get("commit", "?")[:12],
                                                "passed" if seen.get("passed") else "FAILED")
                if seen else "not run on this machine yet")
        if long_tests[(b, t)][0] > budget:
            when += "; longer than the whole budget"
        log("  not now  %5.0f s  %s %s (%s)" % (long_tests[(b, t)][0], b, t, when))
    if left:
        log("  ./x test --full (or TESTBED_TEST_BUDGET=all) runs every test")
    return "not (" + " | ".join("(binary_id(%s) & test(=%s))" % k for k in left) + ")" if left else ""


def record(args):
    costs = read_costs(args.costs)
    state = load_state(args.state)
    commit = git("rev-parse", "HEAD")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for key, (secs, passed) in read_junit(args.junit).items():
        if secs >= LONG_SECONDS or costs.get(key, (0,))[0] >= LONG_SECONDS:
            state[key[0] + " " + key[1]] = {"ran": now, "commit": commit, "passed": passed, "seconds": secs}
    os.makedirs(os.path.dirname(args.state) or ".", exist_ok=True)
    tmp = args.state + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
    os.replace(tmp, args.state)


def keep(args):
    costs = read_costs(args.costs)
    measured = read_junit(args.junit)
    if not measured:
        sys.exit("%s: no test times to keep" % args.junit)
    files = source_files()
    for key, (secs, _) in measured.items():
        costs[key] = (secs, files.get(key[0], ""))
    tmp = args.costs + ".tmp"
    with open(tmp, "w") as f:
        f.write("# Each test's seconds in the last kept ./x test run that ran it (./x times --keep).\n")
        f.write("# binary\ttest\tseconds\tsource file\n")
        for (binary, test), (secs, source) in sorted(costs.items()):
            f.write("%s\t%s\t%.1f\t%s\n" % (binary, test, secs, source))
    os.replace(tmp, args.costs)
    print("test times kept in " + args.costs)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["select", "record", "keep"])
    p.add_argument("--costs", required=True)
    p.add_argument("--junit")
    p.add_argument("--state")
    p.add_argument("--budget", default="all")
    p.add_argument("--add-cost", action="append", default=[], metavar="'BINARY TEST=SECONDS'")
    p.add_argument("--deadline", type=float, metavar="EPOCH_SECONDS")
    args = p.parse_args()
    if args.action == "select":
        print(select(args))
    elif args.action == "record":
        record(args)
    else:
        keep(args)


if __name__ == "__main__":
    main()
