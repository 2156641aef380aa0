#!/usr/bin/env python3
"""Modification times that say when a file's content last changed, so that
cargo rebuilds only the crates whose sources did.

Cargo decides that a workspace crate is stale when one of its source files
is newer than its last build (stable cargo has no content hashes; that is
the unstable `-Z checksum-freshness`). A fresh clone gives every file the
time of the clone, so each CI run on a warm target dir compiled all seven
of our crates again, in release and in the test build (~6 min of CPU on 2
cores), even when a commit touched one of them. Cargo's artifacts are
relocatable (they do not depend on the checkout's path), only the times are
in the way.

This script keeps, in the cargo target dir, each tracked file's sha256 and
a time at which it had that content, and before a build gives every
tracked file:
  - its recorded time, when its content is the recorded content;
  - the time of this build (now) when its content is not: newer than any
    artifact, so cargo rebuilds what reads it.

Why that is safe: every artifact newer than a file's recorded time was
built while the file had the recorded content, as long as every build into
the target dir went through `./x` since the record was kept. A build by
anything else (a plain `cargo test` in a checkout, another checkout) leaves
cargo fingerprints newer than the record; then the record is not used, the
files keep the times they have (cargo's own rule, as without this script)
and the times they have are recorded for the next time.

  source_times.py restore --root DIR --target DIR
      sets the times; the record to keep waits beside the old one (.pending)
  source_times.py record --target DIR
      keeps the pending record (after the builds, pass or fail)
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

RECORD = "testbed-source-times.json"
PENDING = RECORD + ".pending"
VERSION = 1


def log(msg):
    print("[x] " + msg, file=sys.stderr)


def tracked_files(root):
    """Paths (relative to root) of the files git tracks, or None outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached"],
            check=True, capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def newest_fingerprint(target):
    """The newest modification time (ns) of any cargo fingerprint file under
    target (every profile and target triple), 0 if none."""
    newest = 0
    for dirpath, dirnames, filenames in os.walk(target):
        # Fingerprints live in <profile>/.fingerprint and
        # <triple>/<profile>/.fingerprint; skip the bulky rest.
        if os.path.basename(dirpath) == ".fingerprint":
            for unit in dirnames:
                unit_dir = os.path.join(dirpath, unit)
                try:
                    for name in os.listdir(unit_dir):
                        newest = max(newest, os.lstat(os.path.join(unit_dir, name)).st_mtime_ns)
                except OSError:
                    continue
            dirnames[:] = []
            continue
        depth = os.path.relpath(dirpath, target).count(os.sep)
        dirnames[:] = [d for d in dirnames if d == ".fingerprint" or depth < 2 and d not in
                       ("deps", "build", "incremental", "nextest", "cargo-timings", "doc")]
    return newest


def load_record(target):
    """The record's files, or {} with the reason it cannot be used."""
    path = os.path.join(target, RECORD)
    if not os.path.exists(path):
        return {}, "no record of earlier builds in this target dir"
    try:
        with open(path) as f:
            record = json.load(f)
        if record.get("version") != VERSION:
            return {}, "the record is of another version"
        files = record["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {}, "the record %s cannot be read (%s)" % (path, e)
    kept = os.stat(path).st_mtime_ns
    if newest_fingerprint(target) > kept:
        return {}, "something other than ./x built into this target dir since the record"
    return files, None


def restore(root, target):
    now = time.time_ns()
    paths = tracked_files(root)
    if paths is None:
        log("not a git checkout: file times left as they are")
        return
    old, why_not = load_record(target)
    files, same = {}, 0
    for rel in paths:
        path = os.path.join(root, rel)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        digest = sha256(path)
        seen = old.get(rel)
        if why_not:
            when = os.stat(path).st_mtime_ns
        else:
            if seen and seen[0] == digest:
                when = seen[1]
                same += 1
            else:
                when = now
            os.utime(path, ns=(when, when))
        files[rel] = [digest, when]
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, PENDING), "w") as f:
        json.dump({"version": VERSION, "files": files}, f)
    if why_not:
        log("source times: %s; the %d tracked files keep their times" % (why_not, len(files)))
    else:
        log("source times: %d of %d tracked files unchanged since they were built; "
            "the rest count as changed" % (same, len(files)))


def record(target):
    pending = os.path.join(target, PENDING)
    if not os.path.exists(pending):
        return
    kept = os.path.join(target, RECORD)
    os.replace(pending, kept)
    # Its time says when the builds ended: a fingerprint newer than that
    # was written by a build this record did not see.
    os.utime(kept, None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    r = sub.add_parser("restore")
    r.add_argument("--root", required=True)
    r.add_argument("--target", required=True)
    k = sub.add_parser("record")
    k.add_argument("--target", required=True)
    args = parser.parse_args()
    if args.action == "restore":
        restore(args.root, args.target)
    else:
        record(args.target)


if __name__ == "__main__":
    sys.exit(main())
